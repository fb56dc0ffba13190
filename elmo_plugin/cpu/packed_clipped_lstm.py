"""`packed_clipped_lstm`: the CPU fast path of `elmo_lstm`'s clipped LSTM. A layer's directions
run over packed sequences (only real positions are computed), with a hand-written backward; both
time loops are C++ (`compiled_lstm_steps`), every matmul goes through oneDNN (`onednn_matmul`).
It takes float32 CPU tensors outside autocast where oneDNN and the C++ loops are there
(`runs_fast`), and equals the reference loop (`modules/clipped_lstm.py`) within float32
rounding."""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import torch
from torch.autograd.function import once_differentiable

from elmo_plugin.cpu import side_by_side
from elmo_plugin.cpu.compiled_lstm_steps import CompiledSteps, compiled_steps
from elmo_plugin.cpu.distinct_rows import distinct_rows, row_hashes
from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, LstmWeights
from elmo_plugin.cpu.onednn_matmul import RightMatrix, linear, onednn_built, transposed_matmul


def runs_fast(inputs: torch.Tensor) -> bool:
    """Whether `packed_clipped_lstm` takes these inputs: float32 CPU tensors outside CPU autocast
    (whose bf16 is the reference loop's), with oneDNN in torch and the C++ loops built (asked
    once; a failed build warns once)."""
    return (
        inputs.device.type == "cpu"
        and inputs.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and onednn_built()
        and compiled_steps() is not None
    )


def cpp_loops() -> CompiledSteps:
    """The C++ time loops (`runs_fast` says whether they could be built)."""
    loops = compiled_steps()
    if loops is None:
        raise RuntimeError("packed_clipped_lstm: its C++ loops could not be built (see runs_fast)")
    return loops


def packed_clipped_lstm(
    inputs: torch.Tensor,
    weights: LstmWeights,
    lengths: torch.Tensor,
    clips: Clips,
    initial: Optional[LstmState] = None,
) -> tuple[torch.Tensor, LstmState]:
    """inputs (directions, batch, timesteps, dim), batch sorted by decreasing `lengths` (batch,);
    `initial` to start from, None for zero -> (outputs (directions, batch, timesteps, proj), zero
    past each length; the state at each row's last position, `initial` for a row of length 0).
    Gradients reach the inputs, the weights and the initial state."""
    directions, batch, timesteps, dim = inputs.shape
    index, sizes = packed_positions(lengths, timesteps)
    proj, cells = weights.w_hr.shape[1:]
    first_rows: tuple[Optional[torch.Tensor], Optional[torch.Tensor]]
    if initial is None:
        initial = LstmState(
            inputs.new_zeros(directions, batch, proj), inputs.new_zeros(directions, batch, cells)
        )
        first_rows = (None, None)  # zero: the loops skip what it would add
    else:  # the rows of the first step (all rows but those of length 0)
        first = sizes[0] if sizes else 0
        first_rows = (initial.state[:, :first], initial.memory[:, :first])
    outputs = inputs.new_zeros(directions, batch * timesteps, proj)
    if not sizes:
        return outputs.view(directions, batch, timesteps, -1), initial
    packed = inputs.reshape(directions, batch * timesteps, dim).index_select(1, index)
    states, memory = PackedClippedLstm.apply(packed, *weights, *first_rows, Steps(sizes, clips))
    outputs = outputs.index_copy(1, index, states)
    # Row r's last position in the packed order: the start of step lengths[r] - 1, plus r.
    starts = step_starts(sizes, lengths.device)
    ended = lengths > 0
    last = torch.where(
        ended, starts[(lengths - 1).clamp(min=0)] + torch.arange(batch, device=lengths.device), 0
    )
    keep = ended.view(1, batch, 1)
    final = LstmState(
        torch.where(keep, states[:, last], initial.state),
        torch.where(keep, memory[:, last], initial.memory),
    )
    return outputs.view(directions, batch, timesteps, -1), final


class Steps(NamedTuple):
    """What both time loops need besides tensors: step t holds the packed rows [start, start +
    sizes[t]) (`packed_positions`), and the clips."""

    sizes: list[int]
    clips: Clips


class ForwardBuffers(NamedTuple):
    """What the forward time loop fills, every direction's (a leading directions dimension) or
    one's: memory (n, cells) and states (n, proj) at every position; tanh_memory and hidden
    (n, cells) with a backward pass to come, else one step's rows (sizes[0], cells)."""

    memory: torch.Tensor
    tanh_memory: torch.Tensor
    hidden: torch.Tensor
    states: torch.Tensor

    def direction(self, d: int) -> "ForwardBuffers":
        return ForwardBuffers(*(buffer[d] for buffer in self))


class DirectionGrads(NamedTuple):
    """One direction's gradients, without the directions dimension: inputs (n, in), w_ih and
    w_hh as transposed views of (in, 4 * cells) and (proj, 4 * cells), bias (1, 4 * cells),
    w_hr (proj, cells), the initial state (sizes[0], proj) and memory (sizes[0], cells) where
    they need one, else None."""

    inputs: torch.Tensor
    w_ih: torch.Tensor
    bias: torch.Tensor
    w_hh: torch.Tensor
    w_hr: torch.Tensor
    state0: Optional[torch.Tensor]
    memory0: Optional[torch.Tensor]


class PackedClippedLstm(torch.autograd.Function):
    """
    All directions of one layer over packed sequences: inputs (directions, n, in) in time-major
    packed order (`packed_positions`), the `LstmWeights` as separate tensors. Then the state
    (directions, sizes[0], proj) and memory (directions, sizes[0], cells) before the first step
    (None: zero), `Steps` -> (states (directions, n, proj), memory (directions, n, cells)).

    One direction at a time (each direction's tensors contiguous; with 2 or more torch threads
    the directions run side by side, one per thread: `side_by_side`). Forward: x W_ih + b for
    every position in one matmul (at inference, once per distinct input row, each step gathering
    its rows), then the C++ time loop: per step the recurrent and the projection matmuls and one
    pass of gate arithmetic over the rows, in preallocated buffers. Backward: the C++ time loop
    backwards, per step only the two matmuls that carry the gradient back in time; the weight
    and input gradients are one matmul each over all steps, and the weight gradients come out
    contiguous in the weights' own layout (what `AccumulateGrad` adds without a strided copy).
    Every matmul goes through `onednn_matmul` (the per-step weights prepacked once per call, by
    each direction on its own thread). Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, inputs, w_ih, bias, w_hh, w_hr, state0, memory0, steps):  # type: ignore[override]
        weights = LstmWeights(w_ih, bias, w_hh, w_hr)
        initial = None if state0 is None else LstmState(state0, memory0)
        (directions, n, _), (proj, cells) = inputs.shape, w_hr.shape[1:]
        # Without a backward pass (inference) only the memory is kept for every position; the
        # tanh of the memory and the projection's input o * tanh(memory) live in one step's rows.
        every_step = any(ctx.needs_input_grad)
        kept_rows = n if every_step else steps.sizes[0]
        buffers = ForwardBuffers(
            memory=inputs.new_empty(directions, n, cells),
            tanh_memory=inputs.new_empty(directions, kept_rows, cells),
            hidden=inputs.new_empty(directions, kept_rows, cells),
            states=inputs.new_empty(directions, n, proj),
        )
        run = functools.partial(
            forward_direction,
            inputs=inputs,
            repeated=None if every_step else repeated_rows(inputs),
            weights=weights,
            buffers=buffers,
            initial=initial,
            steps=steps,
            every_step=every_step,
        )
        gates = each_direction(run, directions)  # per direction (n, 4 * cells) when every_step
        kept = gates if every_step else []  # only a backward pass reads the gates
        ctx.save_for_backward(inputs, w_ih, w_hh, w_hr, state0, memory0, *buffers, *kept)
        ctx.steps = steps
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not zeros
        return buffers.states, buffers.memory

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_states, grad_memory):  # type: ignore[override]
        inputs, w_ih, w_hh, w_hr, state0, memory0, *rest = ctx.saved_tensors
        buffers = ForwardBuffers(*rest[: len(ForwardBuffers._fields)])
        if grad_states is None:  # only the memory's gradient came
            grad_states = torch.zeros_like(buffers.states)
        run = functools.partial(
            backward_direction,
            gates=rest[len(ForwardBuffers._fields) :],
            inputs=inputs,
            weights=(w_ih, w_hh, w_hr),
            buffers=buffers,
            initial=None if state0 is None else LstmState(state0, memory0),
            initial_needs_grad=any(ctx.needs_input_grad[5:7]),
            grad_states=grad_states,
            grad_memory=grad_memory,
            steps=ctx.steps,
        )
        grads = each_direction(run, inputs.size(0))
        stacked_grads = [
            None if parts[0] is None else stacked(parts) for parts in zip(*grads, strict=True)
        ]
        return (*stacked_grads, None)


def forward_direction(
    d: int,
    *,
    inputs: torch.Tensor,
    repeated: Optional[tuple[torch.Tensor, torch.Tensor]],
    weights: LstmWeights,
    buffers: ForwardBuffers,
    initial: Optional[LstmState],
    steps: Steps,
    every_step: bool,
) -> torch.Tensor:
    """`PackedClippedLstm.forward` for direction d: its input gates x W_ih + b (of the distinct
    rows only, where `repeated_rows` found them), then its C++ time loop into row d of the
    buffers -> its gates (n, 4 * cells), activated when `every_step` (the backward reads them).
    At inference they may be left as they are (the distinct rows' (m, 4 * cells) always are)."""
    w_ih, bias, w_hh, w_hr = (weight[d] for weight in weights)
    if repeated is not None:  # the distinct rows' gates; each step gathers its rows
        distinct, rows = repeated
        gates, gate_rows = linear(distinct, w_ih, bias[0]), rows[d]
    else:
        gates, gate_rows = linear(inputs[d], w_ih, bias[0]), None
    out = buffers.direction(d)
    # states @ W_hh^T and hidden @ W_hr^T at every step: torch's (out, in) weights, transposed
    cpp_loops().forward(
        gates=gates,
        gate_rows=gate_rows,
        memory=out.memory,
        tanh_memory=out.tanh_memory,
        hidden=out.hidden,
        states=out.states,
        w_hh=RightMatrix(w_hh.t()).weight,
        w_hr=RightMatrix(w_hr.t()).weight,
        state0=None if initial is None else initial.state[d],
        memory0=None if initial is None else initial.memory[d],
        sizes=steps.sizes,
        cell_clip=steps.clips.cell,
        proj_clip=steps.clips.proj,
        every_step=every_step,
    )
    return gates


def backward_direction(
    d: int,
    *,
    gates: list[torch.Tensor],
    inputs: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    buffers: ForwardBuffers,
    initial: Optional[LstmState],
    initial_needs_grad: bool,
    grad_states: torch.Tensor,
    grad_memory: Optional[torch.Tensor],
    steps: Steps,
) -> DirectionGrads:
    """`PackedClippedLstm.backward` for direction d: its C++ time loop backwards, then the
    weight and input gradients."""
    inputs, saved, gates_d = inputs[d], buffers.direction(d), gates[d]
    w_ih, w_hh, w_hr = (weight[d] for weight in weights)
    first, proj = steps.sizes[0], saved.states.size(1)
    grad_initial: tuple[Optional[torch.Tensor], Optional[torch.Tensor]] = (
        (inputs.new_empty(first, proj), inputs.new_empty(first, saved.memory.size(1)))
        if initial is not None and initial_needs_grad
        else (None, None)
    )
    # what flows into each state: its output's gradient plus, step by step, what flows back
    # through time (the C++ loop adds it in place)
    grad_states_d = grad_states[d].clone(memory_format=torch.contiguous_format)
    grad_gates = torch.empty_like(gates_d)
    grad_bias = gates_d.new_empty(gates_d.size(1))
    # gradients flow back through the weights themselves: grad @ W for torch's (out, in) W
    cpp_loops().backward(
        gates=gates_d,
        memory=saved.memory,
        tanh_memory=saved.tanh_memory,
        states=saved.states,
        grad_states=grad_states_d,
        grad_memory_out=None if grad_memory is None else grad_memory[d].contiguous(),
        grad_gates=grad_gates,
        grad_bias=grad_bias,
        grad_state0=grad_initial[0],
        grad_memory0=grad_initial[1],
        w_hh_t=RightMatrix(w_hh).weight,
        w_hr_t=RightMatrix(w_hr).weight,
        memory0=None if initial is None else initial.memory[d],
        sizes=steps.sizes,
        cell_clip=steps.clips.cell,
        proj_clip=steps.clips.proj,
    )
    # Weight and input gradients: one matmul each over every position. The big operand of
    # each is the weight side of `linear` (read in place, any strides); w_ih's and w_hh's
    # gradients come out transposed (in, 4 * cells), the cheaper of the two to lay out, and
    # in one matmul: what multiplies each position's gates is [its input, the state before
    # it] (zero or the initial state before the first step), so grad_gates is read once.
    sizes, states = steps.sizes, saved.states
    before = initial.state[d] if initial is not None else states.new_zeros(first, proj)
    states_before = torch.cat([before, states[previous_rows(sizes, states.device)]])
    grad_w_ih, grad_w_hh = transposed_matmul(
        torch.cat([inputs, states_before], dim=1), grad_gates
    ).split([inputs.size(1), proj])
    grad_w_hr = transposed_matmul(grad_states_d, saved.hidden)
    grad_inputs = linear(grad_gates, w_ih.t().contiguous())  # oneDNN reads a contiguous one faster
    return DirectionGrads(
        grad_inputs, grad_w_ih.t(), grad_bias.unsqueeze(0), grad_w_hh.t(), grad_w_hr, *grad_initial
    )


def packed_positions(lengths: torch.Tensor, timesteps: int) -> tuple[torch.Tensor, list[int]]:
    """(batch,) lengths sorted decreasingly -> (flat index into batch * timesteps of every real
    position in time-major order, sequences active at each step). Step t holds the first
    `sizes[t]` rows, so a step's rows and its successor's are prefixes of each other."""
    real = torch.arange(timesteps, device=lengths.device) < lengths.unsqueeze(
        1
    )  # (batch, timesteps)
    step, row = real.t().nonzero(as_tuple=True)
    sizes = real.sum(dim=0)
    return row * timesteps + step, sizes[sizes > 0].tolist()


def stacked(parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """torch.stack(parts), contiguous, each part copied with `copy_`: it lays out a transposed
    2-D view block by block, several times faster than stack's strided copy (0.4 vs 1.8 ms for
    a (4096, 128) weight gradient)."""
    out = parts[0].new_empty((len(parts), *parts[0].shape))
    for d, part in enumerate(parts):
        out[d].copy_(part)
    return out


def each_direction(run: Callable[[int], Any], directions: int) -> list[Any]:
    """[run(d) for every direction d]: the directions are independent, so each runs on its own
    thread where threads can be spared (`side_by_side`), without a graph to record (the
    autograd Function's forward and backward record none)."""
    each: list[Callable[[], Any]] = [functools.partial(run, d) for d in range(directions)]
    if directions > 1 and not torch.is_grad_enabled() and side_by_side.worth_it():
        return side_by_side.side_by_side(each)
    return [direction() for direction in each]


def repeated_rows(inputs: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """(directions, n, in) inputs -> (their distinct rows (m, in), where each position's row is
    (directions, n)) if there are at most 3/4 n of them, else None. A first layer sees one
    vector per token type (a batch of WikiText has about 2.6 positions per type), and x W_ih + b
    on the distinct rows followed by a gather costs less than on every position."""
    directions, n, dim = inputs.shape
    rows = inputs.reshape(-1, dim)
    # the inverse also where it gives up (later layers): a fraction of the unique's own sort
    hashes, hash_inverse = torch.unique(row_hashes(rows), return_inverse=True)
    if 4 * len(hashes) > 3 * n:  # distinct rows are at least as many as hashes: give up
        return None
    distinct, inverse = distinct_rows(rows, hash_inverse)
    return (distinct, inverse.view(directions, n)) if 4 * len(distinct) <= 3 * n else None


def step_starts(sizes: list[int], device: torch.device) -> torch.Tensor:
    """(steps,) the packed position where each step's rows begin."""
    return torch.tensor([0, *sizes[:-1]], device=device).cumsum(0)


def previous_rows(sizes: list[int], device: torch.device) -> torch.Tensor:
    """For every packed position after the first step, the packed position of the same
    sequence one step earlier: (n - sizes[0],)."""
    starts = step_starts(sizes, device)
    sizes_tensor = torch.tensor(sizes, device=device)
    step_of = torch.repeat_interleave(torch.arange(1, len(sizes), device=device), sizes_tensor[1:])
    row_in_step = torch.arange(int(sizes_tensor[1:].sum()), device=device) - (
        starts[step_of] - sizes[0]
    )
    return starts[step_of - 1] + row_in_step
