"""The GPU's whole-sequence clipped LSTM (`modules/sequence_clipped_lstm.py`) against the
reference loop (`modules/clipped_lstm.py`): float64 gradcheck, float32 values, final states and
every gradient, bf16 autocast, no host reads and fixed shapes, and a whole `elmo_bilm` step."""

import logging
import threading
from collections.abc import Callable
from typing import Optional

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounterWithBackend

from benchmarks.support.op_audit import OpAudit
from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, LstmWeights
from elmo_plugin.modules import elmo_lstm as elmo_lstm_module
from elmo_plugin.modules import sequence_clipped_lstm as sequence_module
from elmo_plugin.modules.clipped_lstm import clipped_lstm
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer
from elmo_plugin.modules.sequence_clipped_lstm import (
    COMPILE_OPTIONS,
    PLAIN_STEPS,
    PointwiseSteps,
    sequence_clipped_lstm,
)
from tests.helpers import TINY_LSTM_OVERRIDES, tiny_model_and_batches

CLIPS = {
    "unclipped": Clips(),
    "both_clips": Clips(0.5, 0.3),
    "cell_clip": Clips(0.5, None),
    "proj_clip": Clips(None, 0.3),
}


def random_lstm(
    sizes: tuple[int, int, int, int], seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, LstmWeights, LstmState]:
    """Inputs (2, batch, timesteps, dim), weights and an initial state, all needing gradients;
    sizes = (batch, timesteps, dim, cells), proj = dim; weights large enough that clips bind."""
    batch, timesteps, dim, cells = sizes
    generator = torch.Generator().manual_seed(seed)

    def leaf(*shape: int, scale: float = 1.0) -> torch.Tensor:
        values = torch.randn(*shape, generator=generator, dtype=dtype) * scale
        return values.requires_grad_()

    weights = LstmWeights(
        leaf(2, 4 * cells, dim, scale=0.7),
        leaf(2, 1, 4 * cells, scale=0.7),
        leaf(2, 4 * cells, dim, scale=0.7),
        leaf(2, dim, cells, scale=0.7),
    )
    initial = LstmState(leaf(2, batch, dim, scale=0.3), leaf(2, batch, cells, scale=0.3))
    return leaf(2, batch, timesteps, dim), weights, initial


def loss_weights(outputs, state, memory, seed: int = 3) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=generator) for t in (outputs, state, memory)]


def values_and_gradients(
    function, inputs, weights, lengths, clips, initial: Optional[LstmState], bf16: bool = False
) -> list[torch.Tensor]:
    """(outputs, final state, final memory, then the gradients of a random linear loss of all
    three w.r.t. the inputs, every weight and, where given, the initial state and memory); the
    forward under CPU bf16 autocast where `bf16`."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        outputs, (state, memory) = function(inputs, weights, lengths, clips, initial)
    values = (outputs, state, memory)
    factors = loss_weights(*values)
    loss = sum((value.float() * f).sum() for value, f in zip(values, factors, strict=True))
    wrt = [inputs, *weights, *(initial or ())]
    return [outputs, state, memory, *torch.autograd.grad(loss, wrt)]


def assert_all_close(got: list[torch.Tensor], want: list[torch.Tensor], tolerance: float) -> None:
    """Same dtypes and shapes, values within `tolerance` times each tensor's largest (at least
    1): a gradient's small entries sum large terms."""
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, index
        difference = float((a.detach().float() - b.detach().float()).abs().max())
        assert difference <= tolerance * max(1.0, float(b.detach().abs().max())), (
            index,
            difference,
        )


@pytest.mark.parametrize("clips", [CLIPS["unclipped"], CLIPS["both_clips"]], ids=str)
def test_float64_gradcheck_of_the_inputs_every_weight_and_the_initial_state(clips):
    """The hand-written backward against finite differences: rows of lengths 5, 2, 0 and 4
    (padding, a row that never runs), from a given initial state; with clips, they bind."""
    inputs, weights, initial = random_lstm((4, 5, 3, 4), dtype=torch.float64)
    lengths = torch.tensor([5, 2, 0, 4])

    def run(inputs, w_ih, bias, w_hh, w_hr, state, memory):
        weights = LstmWeights(w_ih, bias, w_hh, w_hr)
        outputs, final = sequence_clipped_lstm(
            inputs, weights, lengths, clips, LstmState(state, memory)
        )
        return outputs, *final

    arguments = (inputs, *weights, *initial)
    assert torch.autograd.gradcheck(run, arguments)
    if clips.proj is not None:
        assert run(*arguments)[0].abs().max() == clips.proj


@pytest.mark.parametrize("given_initial", [True, False], ids=["initial_state", "zero_state"])
@pytest.mark.parametrize("clips", CLIPS.values(), ids=CLIPS.keys())
def test_equals_the_reference_loop_in_values_final_states_and_every_gradient(clips, given_initial):
    """Float32, rows of lengths 9, 3, 0, 5, 1 and 9 in any order: the same outputs (zero past
    each length), state and memory at each row's last position (the initial ones for the row of
    length 0), and gradients w.r.t. the inputs, every weight and the initial state and memory;
    without gradients (inference) the same values."""
    inputs, weights, initial = random_lstm((6, 9, 16, 32))
    lengths = torch.tensor([9, 3, 0, 5, 1, 9])
    start = initial if given_initial else None
    ours = values_and_gradients(sequence_clipped_lstm, inputs, weights, lengths, clips, start)
    reference = values_and_gradients(clipped_lstm, inputs, weights, lengths, clips, start)
    assert_all_close(ours, reference, 1e-5)
    assert not ours[0][:, 2].any() and not ours[0][:, 4, 1:].any()
    with torch.no_grad():
        outputs, final = sequence_clipped_lstm(inputs, weights, lengths, clips, start)
    assert_all_close([outputs, *final], ours[:3], 0.0)


@pytest.mark.parametrize("clips", [CLIPS["unclipped"], CLIPS["both_clips"]], ids=str)
def test_a_loss_on_the_final_memory_alone_gives_the_reference_gradients(clips):
    """No gradient reaches the outputs or the final state: the backward starts from the final
    memory's alone."""
    inputs, weights, initial = random_lstm((3, 6, 8, 12))
    lengths = torch.tensor([6, 2, 4])
    wrt = [inputs, *weights, *initial]
    grads = []
    for function in (sequence_clipped_lstm, clipped_lstm):
        memory = function(inputs, weights, lengths, clips, initial)[1].memory
        grads.append(torch.autograd.grad((memory**2).sum(), wrt))
    assert_all_close(*grads, 1e-5)


@pytest.mark.parametrize("clips", [Clips(3.0, 3.0), Clips(0.5, 0.3)], ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_under_bf16_autocast_values_equal_the_reference_and_gradients_within_two_percent(
    clips, seed
):
    """Under CPU bf16 autocast both paths run the matmuls and keep the state in bf16, the memory
    in float32: the same values and dtypes (within one bf16 rounding). The backward rounds
    differently by design (its pointwise derivatives in float32 from the forward's bf16 gates,
    where autograd through the reference loop rounds each to bf16; W_hh's and W_hr's gradients
    one bf16 matmul over every step, where the reference rounds each step's): every gradient
    within 2% of its largest entry, with clips that never bind (3) and with clips that bind
    (0.5 / 0.3, the masks read from the same bf16 and float32 values)."""
    lengths = torch.tensor([9, 3, 0, 5, 1, 9])
    inputs, weights, initial = random_lstm((6, 9, 16, 32), seed)
    weights = LstmWeights(*(w.detach().mul(0.4).requires_grad_() for w in weights))
    args = (inputs, weights, lengths, clips, initial)
    ours = values_and_gradients(sequence_clipped_lstm, *args, bf16=True)
    reference = values_and_gradients(clipped_lstm, *args, bf16=True)
    assert [t.dtype for t in ours[:3]] == [torch.bfloat16, torch.bfloat16, torch.float32]
    assert_all_close(ours[:3], reference[:3], 2**-8)
    for index, (got, want) in enumerate(zip(ours[3:], reference[3:], strict=True)):
        assert got.dtype == want.dtype == torch.float32
        assert (got - want).abs().max() <= 0.02 * want.abs().max(), index
    bound = float(reference[0].abs().max())
    assert bound < 2.0 if clips.proj == 3.0 else bound == pytest.approx(0.3, abs=2e-3)


def audited_forward_and_backward(seed: int, lengths: list[int]) -> OpAudit:
    inputs, weights, initial = random_lstm((4, 7, 8, 12), seed)
    args = (inputs, weights, torch.tensor(lengths), Clips(0.5, 0.3), initial)
    with OpAudit() as audit:
        values_and_gradients(sequence_clipped_lstm, *args)
    return audit


def test_dispatches_no_syncing_op_and_the_same_ops_for_two_inputs_of_one_shape():
    """Forward and backward on CPU tensors, two inputs of one shape with other values and other
    lengths: no op that would make a GPU wait for the host, and the same (op, output shapes)."""
    first = audited_forward_and_backward(0, [7, 2, 0, 5])
    second = audited_forward_and_backward(1, [3, 7, 7, 1])
    assert first.syncs() == [], [f"{op.name} at {op.where}" for op in first.syncs()]
    assert first.trace() == second.trace()


def weight_sized_tensors_made(function, timesteps: int) -> int:
    """How many tensors of W_hh's or W_hr's shape (or transposed) a forward and backward make."""
    inputs, weights, initial = random_lstm((4, timesteps, 8, 12))
    args = (inputs, weights, torch.tensor([timesteps] * 4), Clips(0.5, 0.3), initial)
    shapes = {tuple(w.shape) for w in (weights.w_hh, weights.w_hr)}
    shapes |= {(s[0], s[2], s[1]) for s in shapes}
    with OpAudit() as audit:
        values_and_gradients(function, *args)
    return sum(1 for _, outputs in audit.trace() for shape in outputs if shape in shapes)


def test_the_weight_gradients_are_one_matmul_each_however_many_timesteps():
    """The reference's backward makes a W_hh and a W_hr gradient at every step and sums them;
    ours makes each once over every step's rows: as many weight-sized tensors for 5 steps as
    for 20."""
    assert weight_sized_tensors_made(sequence_clipped_lstm, 5) == weight_sized_tensors_made(
        sequence_clipped_lstm, 20
    )
    assert weight_sized_tensors_made(clipped_lstm, 20) > 4 * 20


def test_compiled_steps_trace_whole_once_for_every_timestep_with_the_plain_steps_numbers():
    """torch.compile of each pointwise step as the GPU compiles it, with the `aot_eager` backend
    (what dynamo traces and guards is the same on every device): no graph break (fullgraph) and
    one graph for all the steps of a shape, none more for another input of that shape; another
    number of timesteps adds at most one (its strides then dynamic), a third none. The compiled
    steps give the plain steps' values and gradients."""
    counters = [CompileCounterWithBackend("aot_eager") for _ in PLAIN_STEPS]
    compiled = PointwiseSteps(
        *(
            torch.compile(step, backend=counter, **COMPILE_OPTIONS)
            for step, counter in zip(PLAIN_STEPS, counters, strict=True)
        )
    )

    def with_compiled_steps(*args):
        return sequence_clipped_lstm(*args, steps=compiled)

    graphs = []
    try:
        for seed, lengths in enumerate([[7, 2, 0, 5], [3, 7, 7, 1], [12, 2, 9, 0], [15] * 4]):
            inputs, weights, initial = random_lstm((4, max(lengths), 8, 12), seed)
            args = (inputs, weights, torch.tensor(lengths), Clips(0.5, 0.3), initial)
            plain = values_and_gradients(sequence_clipped_lstm, *args)
            assert_all_close(values_and_gradients(with_compiled_steps, *args), plain, 1e-6)
            graphs.append([counter.frame_count for counter in counters])
    finally:
        torch._dynamo.reset()
    assert graphs[0] == graphs[1] == [1, 1, 1, 1]
    assert graphs[2] == graphs[3] and max(graphs[2]) <= 2


def bilm_loss_and_gradients(cpu_loop: str, tiny_corpus) -> list[torch.Tensor]:
    values = {
        **TINY_LSTM_OVERRIDES,
        "model.dropout": 0.0,
        "model.contextualizer.dropout": 0.0,
        "model.contextualizer.cell_clip": 0.5,
        "model.contextualizer.proj_clip": 0.1,
        "model.contextualizer.cpu_loop": cpu_loop,
    }
    valid = tiny_corpus / "valid.txt"
    model, (batch,) = tiny_model_and_batches("elmo_lstm.jsonnet", values, valid, [12], False)
    loss = model(**batch)["loss"]
    return [loss, *torch.autograd.grad(loss, list(model.parameters()))]


def test_an_elmo_bilm_on_the_gpu_path_equals_the_reference_loop_in_loss_and_gradients(
    tiny_corpus, monkeypatch
):
    """`gpu_path_on_cpu` runs on the CPU what a GPU runs: a whole `elmo_bilm` (the character
    CNN's `reference`, both LSTM layers' whole-sequence function with clips that bind, full
    softmax) on a padded batch gives the CPU reference loop's loss and every parameter's
    gradient."""
    ran = []
    for name in ("reference", "cpu_fast_path"):
        path = getattr(ElmoCharCnn, name)
        monkeypatch.setattr(ElmoCharCnn, name, recording(ran, name, path))
    whole_sequence = elmo_lstm_module.sequence_clipped_lstm
    monkeypatch.setattr(
        elmo_lstm_module, "sequence_clipped_lstm", recording(ran, "gpu", whole_sequence)
    )
    with gpu_path_on_cpu():
        ours = bilm_loss_and_gradients("fast", tiny_corpus)
    assert ran == ["reference", "gpu", "gpu"]
    ran.clear()
    reference = bilm_loss_and_gradients("reference", tiny_corpus)
    assert ran == ["cpu_fast_path"]
    assert_all_close(ours, reference, 1e-5)


def recording(calls: list, name: str, function: Callable) -> Callable:
    """`function`, appending `name` to `calls` on every call."""

    def run(*args, **kwargs):
        calls.append(name)
        return function(*args, **kwargs)

    return run


def lstm_values_and_gradients(compile_on_gpu: bool, dtype=torch.float32) -> list[torch.Tensor]:
    """A two-layer clipped `elmo_lstm` on the GPU's path (on the CPU): every layer and the
    gradients of the inputs and every parameter, with padding."""
    torch.manual_seed(0)
    lstm = ElmoLstmContextualizer(
        4, 6, 2, cell_clip=0.5, proj_clip=0.3, return_all_layers=True, compile_on_gpu=compile_on_gpu
    ).to(dtype)
    inputs = torch.randn(3, 5, 4, dtype=dtype, requires_grad=True)
    mask = torch.arange(5) < torch.tensor([5, 2, 4]).unsqueeze(1)
    with gpu_path_on_cpu():
        layers = lstm(inputs, mask)
    loss = sum(
        (layer * torch.linspace(-1, 1, layer.size(-1), dtype=dtype)).sum() for layer in layers
    )
    return [*layers, *torch.autograd.grad(loss, [inputs, *lstm.parameters()])]


def compiled_on_the_cpu(monkeypatch, steps: PointwiseSteps) -> None:
    """`steps` as the compiled steps, on the CPU, none failed yet."""
    monkeypatch.setattr(sequence_module, "can_compile_step", lambda device: True)
    monkeypatch.setattr(sequence_module, "compiled_steps", lambda: steps)
    monkeypatch.setattr(sequence_module, "COMPILE_FAILED", threading.Event())


def our_warnings(caplog) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("elmo_plugin") and record.levelno == logging.WARNING
    ]


PTXAS = "ptxas fatal   : Unsupported .version 8.7; current version is '8.4'"


@pytest.mark.parametrize("wrapped", [False, True], ids=["raised", "backend_compiler_failed"])
@pytest.mark.parametrize("failing", ["cell_forward", "state_backward"])
def test_a_compiled_step_that_fails_is_one_warning_and_the_plain_steps_numbers(
    monkeypatch, caplog, failing, wrapped
):
    """A compiled step that raises at its first use (in the forward, or in the backward after a
    forward that ran compiled; raised as is or wrapped by dynamo): one warning naming the error,
    the same layers and gradients as the plain steps, the plain steps from then on."""
    from torch._dynamo.exc import BackendCompilerFailed

    calls = []

    def fails(*args):
        calls.append(failing)
        error = RuntimeError(f"{PTXAS}\nthe rest of the log")
        raise BackendCompilerFailed(fails, error, None) if wrapped else error

    compiled_on_the_cpu(monkeypatch, PLAIN_STEPS._replace(**{failing: fails}))
    plain = lstm_values_and_gradients(compile_on_gpu=False)
    assert not calls
    with caplog.at_level(logging.WARNING):
        ours = lstm_values_and_gradients(compile_on_gpu=True)
        again = lstm_values_and_gradients(compile_on_gpu=True)
    assert calls == [failing]
    assert our_warnings(caplog) == [
        f"The LSTM's compiled steps failed (RuntimeError: {PTXAS}): the plain steps run "
        "instead, slower"
    ]
    assert_all_close(ours, plain, 0.0)
    assert_all_close(again, plain, 0.0)


def test_past_dynamos_recompile_limit_a_compiled_step_is_one_warning_not_an_unseen_eager_run(
    monkeypatch, caplog
):
    """With `COMPILE_OPTIONS`, a step compiled more often than `recompile_limit` raises (where
    without `fullgraph` dynamo would run it uncompiled): here float32 then float64 with a limit
    of 1. One warning, the plain steps' numbers."""
    steps = PointwiseSteps(
        *(torch.compile(step, backend="eager", **COMPILE_OPTIONS) for step in PLAIN_STEPS)
    )
    compiled_on_the_cpu(monkeypatch, steps)
    # (not monkeypatch: its undo deletes a config module's attribute, which torch then hides)
    try:
        with torch._dynamo.config.patch(recompile_limit=1), caplog.at_level(logging.WARNING):
            float32 = lstm_values_and_gradients(compile_on_gpu=True)
            assert our_warnings(caplog) == []
            float64 = lstm_values_and_gradients(compile_on_gpu=True, dtype=torch.float64)
    finally:
        torch._dynamo.reset()
    assert our_warnings(caplog) == [
        "The LSTM's compiled steps failed (FailOnRecompileLimitHit: Hard failure due to "
        "fullgraph=True): the plain steps run instead, slower"
    ]
    assert_all_close(float32, lstm_values_and_gradients(compile_on_gpu=False), 0.0)
    plain64 = lstm_values_and_gradients(compile_on_gpu=False, dtype=torch.float64)
    assert_all_close(float64, plain64, 0.0)
