"""The packed LSTM's forward time loop in C++ (`compiled_lstm_steps`) against the TorchScript
loop it replaces."""

import logging

import pytest
import torch

from elmo_plugin.cpu import compiled_lstm_steps as compiled_module
from elmo_plugin.cpu import packed_clipped_lstm as packed_module
from tests.modules.test_elmo_lstm import outputs_and_gradients

DIM = 6


def directions_lstms(cells: int):
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, cells, proj_size=DIM, batch_first=True) for _ in range(2)]
    for parameter in (p for lstm in lstms for p in lstm.parameters()):
        torch.nn.init.normal_(parameter, std=0.5)  # large enough that clipping binds
    return lstms


def test_the_cpp_loop_builds_here():
    """A guard for CI (whose machines have a C++ compiler and ninja): the loop is built and
    registered, so the tests below compare it and not the TorchScript loop with itself."""
    assert compiled_module.compiled_forward_steps() is torch.ops.elmo_plugin.clipped_lstm_steps


@pytest.mark.parametrize("clips", [(0.5, 0.3), (None, None), (0.5, None), (None, 0.3)])
@pytest.mark.parametrize("repeated", [False, True])
@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("cells", [10, 37])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1]])
def test_cpp_forward_loop_equals_the_torchscript_loop_in_values_and_gradients(
    lengths, cells, with_initial, repeated, clips, monkeypatch
):
    """Training and inference with the C++ forward loop give the TorchScript loop's outputs, final
    (state, memory) and gradients (inputs and every weight) within float32 rounding: with padding,
    length-1 rows, a batch of one, an initial state, repeated input vectors (inference gathers
    each step's gates), with and without each clip, and cell counts below and past one vector
    register (10 and 37: the partial last vector)."""
    lstms = directions_lstms(cells)
    lengths = torch.tensor(lengths)
    shape = (2, len(lengths), int(lengths.max()))
    which = torch.arange(shape[0] * shape[1] * shape[2]).view(shape) % 2
    inputs = (torch.randn(2, DIM)[which] if repeated else torch.randn(*shape, DIM)).requires_grad_()
    initial = (
        (torch.randn(2, len(lengths), DIM), torch.randn(2, len(lengths), cells))
        if with_initial
        else None
    )
    assert packed_module.forward_loop(True) is torch.ops.elmo_plugin.clipped_lstm_steps
    cpp = outputs_and_gradients(lstms, lengths, inputs, initial, clips)
    monkeypatch.setattr(packed_module, "compiled_forward_steps", lambda: None)
    assert isinstance(packed_module.forward_loop(True), torch.jit.ScriptFunction)
    torchscript = outputs_and_gradients(lstms, lengths, inputs, initial, clips)
    for got, want in zip(cpp, torchscript):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()


def test_cpp_loop_runs_only_for_onednns_prepacked_weights():
    """Without prepacked weights (torch's own matmuls, which autocast may change) the Python loop runs."""
    assert packed_module.forward_loop(False) is packed_module.forward_steps


def test_cpp_loop_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("ELMO_PLUGIN_CPP_LOOP", "0")
    assert compiled_module.compiled_forward_steps.__wrapped__() is None


def test_cpp_loop_that_cannot_be_built_leaves_the_torchscript_loop_with_a_warning(
    monkeypatch, caplog
):
    """No compiler (or any failed build): a warning naming the cause, and None (`forward_loop`
    then runs the TorchScript loop)."""
    from torch.utils import cpp_extension

    def no_compiler(**kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    with caplog.at_level(logging.WARNING):
        assert compiled_module.compiled_forward_steps.__wrapped__() is None
    assert "could not be built (Ninja is required to load C++ extensions)" in caplog.text


def test_cpp_loop_refuses_arguments_that_would_reach_outside_its_tensors():
    """The op is reachable through `torch.ops`: wrong shapes, sizes or gate row indices are a
    RuntimeError naming the argument, never a read or write outside a tensor."""
    from elmo_plugin.cpu.onednn_matmul import RightMatrix

    cells, proj, sizes = 4, 3, [2, 1]
    recurrent, projection = (
        RightMatrix(torch.randn(proj, 4 * cells)),
        RightMatrix(torch.randn(cells, proj)),
    )

    def run(gates, gate_rows=None, sizes=sizes, state0=None):
        outputs = (
            torch.empty(3, cells),
            torch.empty(2, cells),
            torch.empty(2, cells),
            torch.empty(3, proj),
        )
        compiled_module.compiled_forward_steps()(
            gates,
            gate_rows,
            *outputs,
            recurrent.weight,
            projection.weight,
            True,
            state0,
            None,
            sizes,
            0.5,
            0.3,
            False,
        )

    run(torch.randn(3, 4 * cells))  # well formed
    with pytest.raises(RuntimeError, match="gate_rows\\[2\\] = 5 is not a row of gates"):
        run(torch.randn(2, 4 * cells), gate_rows=torch.tensor([0, 1, 5]))
    with pytest.raises(RuntimeError, match="gates need n rows"):
        run(torch.randn(2, 4 * cells))
    with pytest.raises(RuntimeError, match="sizes must be positive and non-increasing"):
        run(torch.randn(3, 4 * cells), sizes=[1, 2])
    with pytest.raises(RuntimeError, match="state0 needs sizes\\[0\\] rows"):
        run(torch.randn(3, 4 * cells), state0=torch.randn(1, proj))
