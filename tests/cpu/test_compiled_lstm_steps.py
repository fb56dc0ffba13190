"""The C++ time loops' build (`compiled_lstm_steps`) and the argument checks of their ops (their
numbers: tests/cpu/test_packed_clipped_lstm.py)."""

import logging

import pytest
import torch

from elmo_plugin.cpu import compiled_lstm_steps as compiled_module
from elmo_plugin.cpu.onednn_matmul import RightMatrix


def test_the_cpp_loops_build_here():
    """A guard for CI (whose machines have a C++ compiler and ninja): both ops are registered."""
    steps = compiled_module.compiled_steps()
    assert steps is not None
    assert steps.forward is torch.ops.elmo_plugin.clipped_lstm_forward_steps
    assert steps.backward is torch.ops.elmo_plugin.clipped_lstm_backward_steps


def test_a_failed_build_is_one_warning_naming_the_cause_and_no_loops(monkeypatch, caplog):
    """No compiler, no ninja or any failed build: one warning line (not the compiler's log)."""
    from torch.utils import cpp_extension

    def no_compiler(**kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions\nthe rest of the log")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    with caplog.at_level(logging.WARNING):
        assert compiled_module.compiled_steps.__wrapped__() is None
    # torch's own import-time notice ("No CUDA runtime is found") lands here when this test is
    # the first to import cpp_extension: only the plugin's lines count
    ours = [record for record in caplog.records if record.name.startswith("elmo_plugin")]
    assert [record.getMessage() for record in ours] == [
        "The C++ LSTM loops could not be built (Ninja is required to load C++ extensions): "
        "the reference loop runs instead, slower"
    ]


def test_the_build_name_changes_with_the_flags():
    assert compiled_module.build_name(["-O3"]) != compiled_module.build_name(["-O2"])
    assert compiled_module.build_name(["-O3"]).startswith("elmo_plugin_clipped_lstm_steps_")


CELLS, PROJ, SIZES = 4, 3, [2, 1]


def prepacked(matrix: torch.Tensor) -> torch.Tensor:
    return RightMatrix(matrix).weight


def test_forward_op_refuses_arguments_that_would_reach_outside_its_tensors():
    """The op is reachable through `torch.ops`: wrong shapes, sizes, weights or gate row
    indices are a RuntimeError naming the argument, never a read or write outside a tensor."""
    w_hh, w_hr = torch.randn(PROJ, 4 * CELLS), torch.randn(CELLS, PROJ)

    def run(**changes):
        arguments = dict(
            gates=torch.randn(3, 4 * CELLS),
            gate_rows=None,
            memory=torch.empty(3, CELLS),
            tanh_memory=torch.empty(2, CELLS),
            hidden=torch.empty(2, CELLS),
            states=torch.empty(3, PROJ),
            w_hh=prepacked(w_hh),
            w_hr=prepacked(w_hr),
            state0=None,
            memory0=None,
            sizes=SIZES,
            cell_clip=0.5,
            proj_clip=0.3,
            every_step=False,
        )
        compiled_module.compiled_steps().forward(**{**arguments, **changes})

    run()  # well formed
    with pytest.raises(RuntimeError, match="gate_rows\\[2\\] = 5 is not a row of gates"):
        run(gates=torch.randn(2, 4 * CELLS), gate_rows=torch.tensor([0, 1, 5]))
    with pytest.raises(RuntimeError, match="gates need n rows"):
        run(gates=torch.randn(2, 4 * CELLS))
    with pytest.raises(RuntimeError, match="sizes must be positive and non-increasing"):
        run(sizes=[1, 2])
    with pytest.raises(RuntimeError, match="state0 needs sizes\\[0\\] rows"):
        run(state0=torch.randn(1, PROJ))
    with pytest.raises(RuntimeError, match="float32 and prepacked weights only"):
        run(w_hh=w_hh.t().contiguous())


def test_backward_op_refuses_arguments_that_would_reach_outside_its_tensors():
    w_hh, w_hr = torch.randn(4 * CELLS, PROJ), torch.randn(PROJ, CELLS)

    def run(n=3, **changes):
        arguments = dict(
            gates=torch.rand(n, 4 * CELLS),
            memory=torch.randn(n, CELLS),
            tanh_memory=torch.randn(n, CELLS),
            states=torch.randn(n, PROJ),
            grad_states=torch.randn(n, PROJ),
            grad_memory_out=torch.randn(n, CELLS),
            grad_gates=torch.empty(n, 4 * CELLS),
            grad_bias=torch.empty(4 * CELLS),
            grad_state0=torch.empty(2, PROJ),
            grad_memory0=torch.empty(2, CELLS),
            w_hh_t=prepacked(w_hh),
            w_hr_t=prepacked(w_hr),
            memory0=torch.randn(2, CELLS),
            sizes=SIZES,
            cell_clip=0.5,
            proj_clip=0.3,
        )
        compiled_module.compiled_steps().backward(**{**arguments, **changes})

    run()  # well formed
    run(memory0=None, grad_memory_out=None, grad_state0=None, grad_memory0=None)
    with pytest.raises(RuntimeError, match="for n = sum\\(sizes\\)"):
        run(n=4)
    with pytest.raises(RuntimeError, match="sizes must be positive and non-increasing"):
        run(sizes=[1, 2])
    with pytest.raises(RuntimeError, match="memory0 needs \\(sizes\\[0\\], cells\\)"):
        run(memory0=torch.randn(1, CELLS))
    with pytest.raises(RuntimeError, match="grad_memory_out must be contiguous float32"):
        run(grad_memory_out=torch.randn(4, CELLS))
    with pytest.raises(RuntimeError, match="grad_state0 must be contiguous float32"):
        run(grad_state0=torch.empty(1, PROJ))
    with pytest.raises(RuntimeError, match="grad_memory0 must be contiguous float32"):
        run(grad_memory0=torch.empty(2, CELLS + 1))
    with pytest.raises(RuntimeError, match="contiguous float32 tensors only"):
        run(grad_bias=torch.empty(8 * CELLS)[::2])
    with pytest.raises(RuntimeError, match="prepacked weights only"):
        run(w_hr_t=w_hr.t().contiguous())
