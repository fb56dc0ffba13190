"""The clipped LSTM-with-projection over packed sequences, with a hand-written backward: the CPU
fast path of `elmo_lstm` (inference and training)."""

import functools
import logging
import warnings
from collections.abc import Callable
from typing import Any, Optional

import torch

from elmo_plugin.modules import side_by_side
from elmo_plugin.modules.compiled_lstm_steps import compiled_forward_steps
from elmo_plugin.modules.distinct_rows import distinct_rows, row_hashes
from elmo_plugin.modules.onednn_matmul import (
    RightMatrix,
    linear,
    prepackable,
    right_product,
    transposed_matmul,
)

logger = logging.getLogger(__name__)


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


def tanh_via_sigmoid(
    values: torch.Tensor, out: torch.Tensor, minus_one: torch.Tensor
) -> torch.Tensor:
    """tanh(values) = 2 sigmoid(2 values) - 1 into `out` (may be `values`), `minus_one` a 0-dim
    -1: torch's CPU sigmoid is several times faster than its tanh; equal within float32
    rounding (about 1e-7). Doubling as x + x and -1 + 2 s in one add (2 s is exact, so one
    rounding either way) keep TorchScript from turning a Python number into a tensor (three
    more ops) on every call."""
    torch.add(values, values, out=out).sigmoid_()
    return torch.add(minus_one, out, alpha=2, out=out)


class PackedClippedLstm(torch.autograd.Function):
    """
    All directions of one layer over packed sequences: inputs (directions, n, in) in time-major
    packed order (`packed_positions`), the weights in `torch.nn.LSTM`'s layout, stacked: w_ih
    (directions, 4 * cells, in), bias (directions, 1, 4 * cells), w_hh (directions, 4 * cells,
    proj), w_hr (directions, proj, cells), gates in torch's order i, f, g, o, and the state
    (directions, sizes[0], proj) and memory (directions, sizes[0], cells) before the first step
    (None: zero; constants: no gradient reaches them) -> (states (directions, n, proj), memory
    (directions, n, cells), no gradient through it), memory clipped to +-cell_clip and states
    to +-proj_clip.

    One direction at a time (each direction's tensors contiguous; with 2 or more torch threads
    the directions run side by side, one per thread: `side_by_side`). Forward: x W_ih + b for
    every position in one matmul (at inference, once per distinct input row, each step gathering
    its rows), then per step only the recurrent and the projection matmuls, gate arithmetic in
    place in preallocated buffers. Backward: per step only the two matmuls that carry the
    gradient back in time; the weight and input gradients are one matmul each over all steps,
    and the weight gradients come out contiguous in the weights' own layout (what
    `AccumulateGrad` adds without a strided copy). Every matmul goes through `onednn_matmul`
    (the per-step weights prepacked once per call, by each direction on its own thread). The
    same numbers as autograd through the plain loop, within float32 rounding.
    """

    @staticmethod
    def forward(ctx, inputs, w_ih, bias, w_hh, w_hr, sizes, cell_clip, proj_clip, state0, memory0):  # type: ignore[override]
        (directions, n, _), (proj, cells) = inputs.shape, w_hr.shape[1:]
        memory = inputs.new_empty(directions, n, cells)
        # Without a backward pass (inference) only the memory is kept for every position; the
        # tanh of the memory and the projection's input o * tanh(memory) live in one step's rows.
        every_step = any(ctx.needs_input_grad)
        tanh_memory = (
            torch.empty_like(memory)
            if every_step
            else memory.new_empty(directions, sizes[0], cells)
        )
        hidden = torch.empty_like(tanh_memory)
        states = inputs.new_empty(directions, n, proj)
        prepacked = prepackable(w_hh)  # each direction prepacks its weights on its own thread
        run = functools.partial(
            forward_direction,
            loop=forward_loop(prepacked),
            inputs=inputs,
            repeated=None if every_step else repeated_rows(inputs),
            weights=(w_ih, bias, w_hh, w_hr),
            outputs=(memory, tanh_memory, hidden, states),
            initial=(state0, memory0),
            sizes=sizes,
            clips=(cell_clip, proj_clip),
            every_step=every_step,
        )
        gates = each_direction(
            run, directions, prepacked
        )  # per direction (n, 4 * cells) when every_step
        kept = gates if every_step else []  # only a backward pass reads the gates
        ctx.save_for_backward(
            inputs, w_ih, w_hh, w_hr, memory, tanh_memory, hidden, states, state0, memory0, *kept
        )
        ctx.sizes, ctx.cell_clip, ctx.proj_clip = sizes, cell_clip, proj_clip
        ctx.mark_non_differentiable(memory)
        return states, memory

    @staticmethod
    def backward(ctx, grad_states, _):  # type: ignore[override]
        inputs, w_ih, w_hh, w_hr, memory, tanh_memory, hidden, states, state0, memory0, *gates = (
            ctx.saved_tensors
        )
        prepacked = prepackable(w_hh)
        run = functools.partial(
            backward_direction,
            loop=time_loop(backward_steps, prepacked),
            gates=gates,
            saved=(inputs, memory, tanh_memory, hidden, states),
            weights=(w_ih, w_hh, w_hr),
            initial=(state0, memory0),
            grad_states=grad_states,
            sizes=ctx.sizes,
            clips=(ctx.cell_clip, ctx.proj_clip),
        )
        grads = each_direction(run, len(gates), prepacked)  # per direction
        grad_inputs, grad_w_ih, grad_bias, grad_w_hh, grad_w_hr = (
            stacked(parts) for parts in zip(*grads)
        )
        return grad_inputs, grad_w_ih, grad_bias, grad_w_hh, grad_w_hr, None, None, None, None, None


def stacked(parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """torch.stack(parts), contiguous, each part copied with `copy_`: it lays out a transposed
    2-D view block by block, several times faster than stack's strided copy (0.4 vs 1.8 ms for
    a (4096, 128) weight gradient)."""
    out = parts[0].new_empty((len(parts), *parts[0].shape))
    for d, part in enumerate(parts):
        out[d].copy_(part)
    return out


def each_direction(run: Callable[[int], Any], directions: int, can_thread: bool) -> list[Any]:
    """[run(d) for every direction d]: the directions are independent, so each runs
    on its own thread where threads can be spared (`side_by_side`). Only for oneDNN's prepacked
    matmuls (torch's own could be autocast, which is per thread) and without a graph to record
    (a backward with create_graph)."""
    each = [functools.partial(run, d) for d in range(directions)]
    if directions > 1 and can_thread and not torch.is_grad_enabled() and side_by_side.worth_it():
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


def forward_direction(
    d: int, loop, inputs, repeated, weights, outputs, initial, sizes, clips, every_step
) -> torch.Tensor:
    """`PackedClippedLstm.forward` for direction d: its input gates x W_ih + b (of the distinct
    rows only, where `repeated_rows` found them), then its time loop (`forward_steps` as
    `forward_loop` gives it), into row d of the (memory, tanh_memory, hidden, states) outputs ->
    its gates (n, 4 * cells), activated when `every_step` (the backward reads them); at
    inference they may be left as they are (the distinct rows' (m, 4 * cells) always are)."""
    w_ih, bias, w_hh, w_hr = weights
    if repeated is not None:  # the distinct rows' gates; each step gathers its rows
        distinct, rows = repeated
        gates, gate_rows = linear(distinct, w_ih[d], bias[d, 0]), rows[d]
    else:
        gates, gate_rows = linear(inputs[d], w_ih[d], bias[d, 0]), None
    state0, memory0 = (None if part is None else part[d] for part in initial)
    # states @ W_hh^T and hidden @ W_hr^T at every step: torch's (out, in) weights, transposed
    recurrent, projection = RightMatrix(w_hh[d].t()), RightMatrix(w_hr[d].t())
    loop(
        gates,
        gate_rows,
        *(output[d] for output in outputs),
        recurrent.weight,
        projection.weight,
        recurrent.prepacked,
        state0,
        memory0,
        sizes,
        clips[0],
        clips[1],
        every_step,
    )
    return gates


def forward_steps(
    gates: torch.Tensor,
    gate_rows: Optional[torch.Tensor],
    memory: torch.Tensor,
    tanh_memory: torch.Tensor,
    hidden: torch.Tensor,
    states: torch.Tensor,
    w_hh: torch.Tensor,
    w_hr: torch.Tensor,
    prepacked: bool,
    state0: Optional[torch.Tensor],
    memory0: Optional[torch.Tensor],
    sizes: list[int],
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    every_step: bool,
) -> None:
    """One direction's time loop (TorchScript compiles it): gates (n, 4 * cells) holding
    x W_ih + b, activated in place, or with `gate_rows` (n,) the distinct rows' x W_ih + b (m,
    4 * cells), position i's gates in row gate_rows[i], left as they are; fills memory (n,
    cells), tanh_memory and hidden (n or sizes[0], cells) and states (n, proj) in place; w_hh and
    w_hr are `RightMatrix` weights, `prepacked` both or neither. Step t's rows are [start, start +
    sizes[t])."""
    minus_one = torch.full((), -1.0, dtype=gates.dtype, device=gates.device)
    # One step's gathered gates: gathering all n positions' up front would write them out of
    # the cache and read them back (14 MB per direction for a WikiText batch of 32).
    gathered = gates.new_empty(sizes[0] if gate_rows is not None else 0, gates.size(1))
    start, previous = 0, 0  # previous: where the step before began
    for step, size in enumerate(sizes):
        end = start + size
        if gate_rows is None:
            step_gates = gates[start:end]
        else:
            step_gates = torch.index_select(gates, 0, gate_rows[start:end], out=gathered[:size])
        # the previous step's first `size` rows are these sequences' states
        step_state0 = states[previous : previous + size] if step > 0 else state0
        if step_state0 is not None:
            step_gates.add_(right_product(step_state0, w_hh, prepacked))
        input_gate, forget_gate, candidate, output_gate = step_gates.chunk(4, dim=-1)
        # candidate tanh(z) = 2 sigmoid(2 z) - 1 (as in `tanh_via_sigmoid`): all four gates in one sigmoid
        candidate.add_(candidate)
        step_gates.sigmoid_()
        torch.add(minus_one, candidate, alpha=2, out=candidate)
        step_memory = memory[start:end]
        torch.mul(input_gate, candidate, out=step_memory)
        step_memory0 = memory[previous : previous + size] if step > 0 else memory0
        if step_memory0 is not None:
            step_memory.addcmul_(forget_gate, step_memory0)
        if cell_clip is not None:
            step_memory.clamp_(-cell_clip, cell_clip)
        kept = start if every_step else 0  # where this step's tanh_memory and hidden rows begin
        step_hidden = hidden[kept : kept + size]
        torch.mul(
            tanh_via_sigmoid(step_memory, tanh_memory[kept : kept + size], minus_one),
            output_gate,
            out=step_hidden,
        )
        step_states = states[start:end]
        step_states.copy_(right_product(step_hidden, w_hr, prepacked))
        if proj_clip is not None:
            step_states.clamp_(-proj_clip, proj_clip)
        previous, start = start, end


def backward_direction(
    d: int, loop, gates, saved, weights, initial, grad_states, sizes, clips
) -> tuple[torch.Tensor, ...]:
    """`PackedClippedLstm.backward` for direction d, its time loop `backward_steps` as
    `time_loop` gives it -> its gradients (inputs, w_ih, bias, w_hh, w_hr), each without the
    directions dimension; w_ih's and w_hh's as transposed views (`torch.stack` lays them out)."""
    inputs, memory, tanh_memory, hidden, states = (tensor[d] for tensor in saved)
    w_ih, w_hh, w_hr = (weight[d] for weight in weights)
    # gradients flow back through the weights themselves: grad @ W for torch's (out, in) W
    w_hh_t, w_hr_t = RightMatrix(w_hh), RightMatrix(w_hr)
    state0, memory0 = (None if part is None else part[d] for part in initial)
    # what flows into each state: its output's gradient plus, step by step, what flows back through time
    grad_states = grad_states[d].clone()
    grad_gates, grad_bias = loop(
        gates[d],
        memory,
        tanh_memory,
        states,
        grad_states,
        clips[0],
        clips[1],
        w_hh_t.weight,
        w_hr_t.weight,
        w_hh_t.prepacked,
        memory0,
        sizes,
    )
    # Weight and input gradients: one matmul each over every position. The big operand of
    # each is the weight side of `linear` (read in place, any strides); w_ih's and w_hh's
    # gradients come out transposed (in, 4 * cells), the cheaper of the two to lay out, and
    # in one matmul: what multiplies each position's gates is [its input, the state before
    # it] (zero or state0 before the first step), so grad_gates is read once.
    first, proj = sizes[0], states.size(1)
    before = state0 if state0 is not None else states.new_zeros(first, proj)
    states_before = torch.cat([before, states[previous_rows(sizes, states.device)]])
    grad_w_ih, grad_w_hh = transposed_matmul(
        torch.cat([inputs, states_before], dim=1), grad_gates
    ).split([inputs.size(1), proj])
    grad_w_hr = transposed_matmul(grad_states, hidden)
    grad_inputs = linear(
        grad_gates, w_ih.t().contiguous()
    )  # oneDNN reads a contiguous weight faster
    return grad_inputs, grad_w_ih.t(), grad_bias.unsqueeze(0), grad_w_hh.t(), grad_w_hr


def backward_steps(
    gates: torch.Tensor,
    memory: torch.Tensor,
    tanh_memory: torch.Tensor,
    states: torch.Tensor,
    grad_states: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    w_hh_t: torch.Tensor,
    w_hr_t: torch.Tensor,
    prepacked: bool,
    memory0: Optional[torch.Tensor],
    sizes: list[int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """One direction's time loop backwards (TorchScript compiles it): grad_states (n, proj), the
    gradient of the states' outputs, gets in place what flows back through time; memory and
    states (clamped) tell where the clips passed the gradient; w_hh_t and w_hr_t: the
    transposed weights as `RightMatrix` weights -> the gradients w.r.t. the pre-activation gates
    (n, 4 * cells) and the bias (4 * cells,). Masks and bias sums are taken a step at a time,
    while the step's rows are in cache."""
    grad_gates = torch.empty_like(gates)
    grad_bias = gates.new_zeros(gates.size(1))
    grad_memory: Optional[torch.Tensor] = (
        None  # w.r.t. this step's memory, through the next step's forget gate
    )
    end = gates.size(0)
    for step in range(len(sizes) - 1, -1, -1):
        size = sizes[step]
        start = end - size
        grad_state = grad_states[start:end]
        if proj_clip is not None:
            passed_by_clamp(grad_state, states[start:end], proj_clip)
        grad_hidden = right_product(grad_state, w_hr_t, prepacked)
        input_gate, forget_gate, candidate, output_gate = gates[start:end].chunk(4, dim=-1)
        d_input, d_forget, d_candidate, d_output = grad_gates[start:end].chunk(4, dim=-1)
        step_tanh = tanh_memory[start:end]
        torch.mul(grad_hidden, step_tanh, out=d_output).mul_(sigmoid_slope(output_gate))
        # d(memory) = d(hidden) * o * (1 - tanh^2) = d(hidden) * (o - (o tanh) tanh)
        grad_cell = grad_hidden.mul_(
            torch.addcmul(output_gate, output_gate * step_tanh, step_tanh, value=-1.0)
        )
        if grad_memory is not None:
            grad_cell[: grad_memory.size(0)].add_(grad_memory)
        if cell_clip is not None:
            passed_by_clamp(grad_cell, memory[start:end], cell_clip)
        torch.mul(grad_cell, candidate, out=d_input).mul_(sigmoid_slope(input_gate))
        # d(candidate) = d(memory) * i * (1 - g^2) = d(memory) * (i - (i g) g)
        torch.mul(
            grad_cell,
            torch.addcmul(input_gate, input_gate * candidate, candidate, value=-1.0),
            out=d_candidate,
        )
        if step > 0:
            previous = start - sizes[step - 1]  # where the step before began
            torch.mul(grad_cell, memory[previous : previous + size], out=d_forget).mul_(
                sigmoid_slope(forget_gate)
            )
            grad_memory = grad_cell.mul_(forget_gate)
            grad_states[previous : previous + size].add_(
                right_product(grad_gates[start:end], w_hh_t, prepacked)
            )
        elif memory0 is not None:
            torch.mul(grad_cell, memory0, out=d_forget).mul_(sigmoid_slope(forget_gate))
        else:
            d_forget.zero_()  # the memory before the first step is zero
        grad_bias.add_(grad_gates[start:end].sum(dim=0))
        end = start
    return grad_gates, grad_bias


def passed_by_clamp(grad: torch.Tensor, clamped: torch.Tensor, clip: float) -> None:
    """grad *= (|clamped| < clip) in place, in one op: a clamp to +-clip passes the gradient
    where it did not bind. hardtanh is that clamp; its backward makes the mask and multiplies
    (a bool mask times floats took four ops, the mask cast to float among them)."""
    torch.ops.aten.hardtanh_backward(grad, clamped, -clip, clip, grad_input=grad)


def sigmoid_slope(activated: torch.Tensor) -> torch.Tensor:
    """sigmoid'(x) = s (1 - s) = s - s * s from s = sigmoid(x), in one op."""
    return torch.addcmul(activated, activated, activated, value=-1.0)


def time_loop(loop: Callable[..., Any], prepacked: bool) -> Callable[..., Any]:
    """The time loop to run: compiled (`scripted`) for oneDNN's prepacked weights, else as Python
    (torch's own matmuls could be autocast, which TorchScript would not see). Asked on the
    caller's thread, before the directions go side by side: TorchScript compiles on one thread."""
    return scripted(loop) if prepacked else loop


def forward_loop(prepacked: bool) -> Callable[..., Any]:
    """`forward_steps` to run: in C++ (`compiled_lstm_steps`: faster, the same numbers within
    float32 rounding) for oneDNN's prepacked weights where it can be built, else as `time_loop`
    gives it."""
    compiled = compiled_forward_steps() if prepacked else None
    return compiled if compiled is not None else time_loop(forward_steps, prepacked)


@functools.cache
def scripted(loop: Callable[..., Any]) -> Callable[..., Any]:
    """The time loop compiled by TorchScript, whose interpreter runs it without holding the GIL:
    two directions side by side compute at once instead of taking turns to dispatch each small
    op from Python, and one thread dispatches faster. The loop itself where TorchScript cannot
    compile it (it is deprecated in torch 2.14; the numbers are the same either way)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script's deprecation notice
            return torch.jit.script(loop)
    except Exception as error:  # noqa: BLE001  (any failure to compile: run the Python loop)
        logger.warning(
            "TorchScript cannot compile %s (%s): it runs as Python, slower", loop.__name__, error
        )
        return loop


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


def packed_clipped_lstm(
    inputs: torch.Tensor,
    weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    lengths: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    initial: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """inputs (directions, batch, timesteps, dim), batch sorted by decreasing `lengths`, weights
    (w_ih, bias, w_hh, w_hr) as `PackedClippedLstm` takes them, `initial` (state (directions,
    batch, proj), memory (directions, batch, cells)) to start from, None for zero; it gets no
    gradient, so it must not need one (state carried between batches is detached) ->
    (outputs (directions, batch, timesteps, proj), zero past each length; (state, memory) at
    each row's last position, `initial` for a row of length 0). Only real positions are
    computed."""
    directions, batch, timesteps, dim = inputs.shape
    index, sizes = packed_positions(lengths, timesteps)
    w_ih, bias, w_hh, w_hr = weights
    if initial is None:
        initial = (
            inputs.new_zeros(directions, batch, w_hr.size(1)),
            inputs.new_zeros(directions, batch, w_hr.size(2)),
        )
        state0 = memory0 = None
    elif any(part.requires_grad for part in initial):
        raise ValueError("packed_clipped_lstm: the initial state must not require grad (detach it)")
    else:
        state0, memory0 = (part[:, : sizes[0]] if sizes else part for part in initial)
    outputs = inputs.new_zeros(directions, batch * timesteps, w_hr.size(1))
    if not sizes:
        return outputs.view(directions, batch, timesteps, -1), initial
    packed = inputs.reshape(directions, batch * timesteps, dim).index_select(1, index)
    states, memory = PackedClippedLstm.apply(
        packed, w_ih, bias, w_hh, w_hr, sizes, cell_clip, proj_clip, state0, memory0
    )
    outputs = outputs.index_copy(1, index, states)
    # Row r's last position in the packed order: the start of step lengths[r] - 1, plus r.
    starts = step_starts(sizes, lengths.device)
    ended = lengths > 0
    last = torch.where(
        ended, starts[(lengths - 1).clamp(min=0)] + torch.arange(batch, device=lengths.device), 0
    )
    keep = ended.view(1, batch, 1)
    final = (
        torch.where(keep, states[:, last], initial[0]),
        torch.where(keep, memory[:, last], initial[1]),
    )
    return outputs.view(directions, batch, timesteps, -1), final
