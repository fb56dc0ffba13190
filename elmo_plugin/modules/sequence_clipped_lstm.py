"""`sequence_clipped_lstm`: the clipped LSTM over a whole sequence as one autograd function, what
`elmo_lstm` runs on a GPU. It computes what the reference loop (`modules/clipped_lstm.py`)
computes, with the backward of cuDNN and bilm-tf: the data gradients step by step backwards,
then one matmul per weight over all timesteps and rows. (Autograd through the reference loop
makes a full W_hh and W_hr gradient at every step and sums them.) The step's pointwise work,
forward and backward, is four plain functions (`PLAIN_STEPS`), each fused by torch.compile on
CUDA with Triton (`compiled_steps`). Where a compiled step raises (Inductor or Triton cannot
build it: no C compiler, a ptxas that does not match the driver, ...), one warning names the
error and the plain steps run from then on, in this process."""

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import torch
from torch.autograd.function import once_differentiable

from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, LstmWeights
from elmo_plugin.modules.clipped_lstm import initial_state, input_gates

logger = logging.getLogger(__name__)


def cell_forward(
    gates: torch.Tensor,
    memory: torch.Tensor,
    running: torch.Tensor,
    cell_clip: Optional[float],
    activated_out: Optional[torch.Tensor],
    memory_out: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """gates (directions, batch, 4 * cells) = x W_ih + b + h W_hh, the memory before the step,
    running (1, batch, 1) -> (the memory after it, the projection's input o * tanh(memory) in
    the gates' dtype). For a backward pass it writes the gates after their nonlinearities
    (i, f, g, o) to `activated_out` and the memory before the step to `memory_out`."""
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
    i, f, g, o = (
        input_gate.sigmoid(),
        forget_gate.sigmoid(),
        candidate.tanh(),
        output_gate.sigmoid(),
    )
    if activated_out is not None and memory_out is not None:
        activated_out.copy_(torch.cat((i, f, g, o), dim=-1))
        memory_out.copy_(memory)
    raw = torch.addcmul(f * memory, i, g)
    clipped = raw if cell_clip is None else raw.clamp(-cell_clip, cell_clip)
    hidden = o * torch.tanh(clipped)
    return torch.where(running, clipped, memory), hidden.to(gates.dtype)


def state_forward(
    projection: torch.Tensor,
    state: torch.Tensor,
    running: torch.Tensor,
    proj_clip: Optional[float],
    state_out: torch.Tensor,
    projection_out: Optional[torch.Tensor],
) -> torch.Tensor:
    """projection (directions, batch, proj) = hidden W_hr, the state before the step -> the state
    after it, also written to `state_out`; the projection before the clip to `projection_out`
    where the backward pass needs it (a projection clip)."""
    clipped = projection if proj_clip is None else projection.clamp(-proj_clip, proj_clip)
    new_state = torch.where(running, clipped, state.to(clipped.dtype))
    state_out.copy_(new_state)
    if projection_out is not None:
        projection_out.copy_(projection)
    return new_state


def state_backward(
    grad_state: torch.Tensor,
    grad_output: torch.Tensor,
    projection: Optional[torch.Tensor],
    running: torch.Tensor,
    proj_clip: Optional[float],
    grad_projection_out: torch.Tensor,
) -> torch.Tensor:
    """The gradient of the state after a step, from the next step and from the outputs (all
    (directions, batch, proj)) -> the part that passes to the state before the step (rows past
    their length keep it); the projection's gradient (zero where the clip bound it, as `clamp`
    gives) written to `grad_projection_out`."""
    total = grad_state + grad_output
    grad_projection = torch.where(running, total, 0)
    if projection is not None and proj_clip is not None:
        # compared in at least float32, as autograd's clamp does: a bf16 value that rounds to
        # the bound's bf16 (e.g. 0.30078125 for 0.3) is outside
        wide = projection.to(torch.promote_types(projection.dtype, torch.float32))
        inside = (wide >= -proj_clip) & (wide <= proj_clip)
        grad_projection = torch.where(inside, grad_projection, 0)
    grad_projection_out.copy_(grad_projection)
    return torch.where(running, 0, total)


def cell_backward(
    activated: torch.Tensor,
    memory: torch.Tensor,
    grad_hidden: torch.Tensor,
    grad_memory: torch.Tensor,
    running: torch.Tensor,
    cell_clip: Optional[float],
    grad_gates_out: torch.Tensor,
    hidden_out: Optional[torch.Tensor],
) -> torch.Tensor:
    """A step backwards: its activated gates (directions, batch, 4 * cells), the memory before
    it, the gradients of the projection's input and of the memory after it -> the gradient of
    the memory before it (rows past their length keep it). It recomputes the memory after the
    step as the forward did (the same operations on the same values: the same clip decisions),
    writes the gates' gradient (before their nonlinearities) to `grad_gates_out` and, for W_hr's
    gradient, the projection's input to `hidden_out`. Computed in the memory's dtype (float32
    under bf16 autocast); the clip passes no gradient where it bound, as `clamp` gives."""
    dtype = memory.dtype
    i, f, g, o = activated.to(dtype).chunk(4, dim=-1)
    raw = torch.addcmul(f * memory, i, g)
    clipped = raw if cell_clip is None else raw.clamp(-cell_clip, cell_clip)
    tanh_memory = torch.tanh(clipped)
    grad_hidden = grad_hidden.to(dtype)
    grad_clipped = torch.where(running, grad_memory, 0) + grad_hidden * o * (1 - tanh_memory**2)
    grad_raw = grad_clipped
    if cell_clip is not None:
        inside = (raw >= -cell_clip) & (raw <= cell_clip)
        grad_raw = torch.where(inside, grad_clipped, 0)
    grad_gates = torch.cat(
        (
            grad_raw * g * i * (1 - i),
            grad_raw * memory * f * (1 - f),
            grad_raw * i * (1 - g**2),
            grad_hidden * tanh_memory * o * (1 - o),
        ),
        dim=-1,
    )
    grad_gates_out.copy_(grad_gates)
    if hidden_out is not None:
        hidden_out.copy_(o * tanh_memory)
    return grad_raw * f + torch.where(running, 0, grad_memory)


class PointwiseSteps(NamedTuple):
    """The step's pointwise work: plain functions (`PLAIN_STEPS`) or compiled (`compiled_steps`)."""

    cell_forward: Callable[..., Any]
    state_forward: Callable[..., Any]
    state_backward: Callable[..., Any]
    cell_backward: Callable[..., Any]


PLAIN_STEPS = PointwiseSteps(cell_forward, state_forward, state_backward, cell_backward)
# `dynamic=None`: a second batch size or number of timesteps switches a step to dynamic sizes and
# strides. `fullgraph`: a graph break, or more recompilations than dynamo's `recompile_limit`,
# raises (and the plain steps run, `FallingBack`) instead of running uncompiled unseen.
COMPILE_OPTIONS: dict[str, Any] = {"dynamic": None, "fullgraph": True}
# Set by the first compiled step that raised: the plain steps run from then on.
COMPILE_FAILED = threading.Event()


@functools.cache
def compiled_steps() -> PointwiseSteps:
    """`PLAIN_STEPS`, each fused by torch.compile (CUDA with Triton only), made on first use.
    Every step of a batch calls them with the same shapes and strides (each step's saved rows
    are contiguous, time-major): one compilation serves them all."""
    return PointwiseSteps(*(torch.compile(step, **COMPILE_OPTIONS) for step in PLAIN_STEPS))


class FallingBack:
    """A compiled step that, where it raises, warns once (`fall_back`) and runs its plain step
    on the same arguments instead, as every step does from then on. The steps write only their
    `*_out` tensors, whole: what a failed call left there is overwritten."""

    def __init__(self, compiled: Callable[..., Any], plain: Callable[..., Any]) -> None:
        self.compiled, self.plain = compiled, plain

    def __call__(self, *args: Any) -> Any:
        if not COMPILE_FAILED.is_set():
            try:
                return self.compiled(*args)
            except Exception as error:  # noqa: BLE001  (Inductor, Triton, ptxas, a C compiler)
                fall_back(error)
        return self.plain(*args)


def fall_back(error: Exception) -> None:
    """The plain steps from now on, with one warning naming the error (its type and first line;
    a backend's failure by its inner error's)."""
    from torch._dynamo.exc import BackendCompilerFailed  # imports dynamo: only on a failure

    if isinstance(error, BackendCompilerFailed):
        error = error.inner_exception
    lines = str(error).strip().splitlines()
    cause = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    COMPILE_FAILED.set()
    logger.warning(
        "The LSTM's compiled steps failed (%s): the plain steps run instead, slower", cause
    )


@functools.cache
def triton_available() -> bool:
    """Whether Triton (torch.compile's GPU code generator) is importable; asked once."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def can_compile_step(device: torch.device) -> bool:
    """True on CUDA when Triton is installed."""
    return device.type == "cuda" and triton_available()


def pointwise_steps(device: torch.device, compile_on_gpu: bool) -> PointwiseSteps:
    """The compiled steps, each `FallingBack`, where `compile_on_gpu` and `can_compile_step` say
    so and none has failed in this process; else the plain."""
    if not compile_on_gpu or not can_compile_step(device) or COMPILE_FAILED.is_set():
        return PLAIN_STEPS
    return PointwiseSteps(*map(FallingBack, compiled_steps(), PLAIN_STEPS))


def sequence_clipped_lstm(
    inputs: torch.Tensor,
    weights: LstmWeights,
    lengths: torch.Tensor,
    clips: Clips,
    initial: Optional[LstmState] = None,
    steps: PointwiseSteps = PLAIN_STEPS,
) -> tuple[torch.Tensor, LstmState]:
    """`clipped_lstm`'s contract: inputs (directions, batch, timesteps, dim), rows in any order,
    lengths (batch,), `initial` (None: zero) -> (outputs (directions, batch, timesteps, proj),
    zero past each length; the state at each row's last position, `initial` for a row of length
    0). Gradients reach the inputs, the weights and the initial state. Under bf16 autocast the
    matmuls and the state are bf16 and the memory float32, as in `clipped_lstm`. Every step runs
    over the whole batch: fixed shapes, no host synchronization."""
    directions, batch, timesteps, _ = inputs.shape
    previous = LstmState(*initial) if initial is not None else initial_state(inputs, weights)
    if timesteps == 0:
        return inputs.new_zeros(directions, batch, 0, weights.w_hr.size(1)), previous
    running = torch.arange(timesteps, device=lengths.device) < lengths.unsqueeze(1)
    # contiguous: each step's mask has the same strides whatever the timesteps (one compilation)
    running_at = running.t().contiguous().view(timesteps, 1, batch, 1)
    gates = input_gates(inputs, weights)  # x W_ih + b of every step in one batched matmul
    tensors = (gates, weights.w_hh, weights.w_hr, *previous)
    if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in tensors):
        states, memory = SequenceClippedLstm.apply(*tensors, running_at, clips, steps)
    else:
        with torch.autocast(inputs.device.type, enabled=False):  # the gates' dtype rules
            states, memory = forward_steps(*tensors, running_at, clips, steps, keep=False)[:2]
    outputs = states.permute(1, 2, 0, 3) * running.unsqueeze(-1).to(states.dtype)
    return outputs, LstmState(states[-1], memory)


class ForwardRecord(NamedTuple):
    """What the forward time loop makes, time-major (each step's rows contiguous): states
    (timesteps, directions, batch, proj), the state after each step; memory (directions, batch,
    cells) after the last. For a backward pass: the gates after their nonlinearities (timesteps,
    directions, batch, 4 * cells), the memory before each step (timesteps, directions, batch,
    cells) and, with a projection clip, the projection before it (timesteps, directions, batch,
    proj); else None."""

    states: torch.Tensor
    memory: torch.Tensor
    activated: Optional[torch.Tensor]
    memories: Optional[torch.Tensor]
    projections: Optional[torch.Tensor]


def forward_steps(
    gates: torch.Tensor,
    w_hh: torch.Tensor,
    w_hr: torch.Tensor,
    state: torch.Tensor,
    memory: torch.Tensor,
    running_at: torch.Tensor,
    clips: Clips,
    steps: PointwiseSteps,
    keep: bool,
) -> ForwardRecord:
    """The time loop: gates (directions, timesteps, batch, 4 * cells) = x W_ih + b, the state and
    memory before the first step, running_at (timesteps, 1, batch, 1) -> a `ForwardRecord` (what
    a backward pass needs where `keep`). The matmuls run in the gates' dtype (bf16 under autocast,
    whose casts the weights get once here), the memory in at least float32."""
    directions, timesteps, batch, _ = gates.shape
    proj, cells = w_hr.shape[1:]
    state, memory = state.detach(), memory.detach()  # as every later step's (one compilation)
    matmul_dtype = gates.dtype
    w_hh_t, w_hr_t = (w.to(matmul_dtype).transpose(1, 2) for w in (w_hh, w_hr))
    memory_dtype = torch.promote_types(matmul_dtype, memory.dtype)
    states = gates.new_empty(timesteps, directions, batch, proj)
    record = ForwardRecord(
        states=states,
        memory=memory,
        activated=gates.new_empty(timesteps, directions, batch, 4 * cells) if keep else None,
        memories=memory.new_empty(timesteps, directions, batch, cells, dtype=memory_dtype)
        if keep
        else None,
        projections=states.new_empty(states.shape) if keep and clips.proj is not None else None,
    )
    for t in range(timesteps):
        memory, hidden = steps.cell_forward(
            torch.baddbmm(gates[:, t], state.to(matmul_dtype), w_hh_t),
            memory,
            running_at[t],
            clips.cell,
            *(None if kept is None else kept[t] for kept in (record.activated, record.memories)),
        )
        state = steps.state_forward(
            torch.bmm(hidden, w_hr_t),
            state,
            running_at[t],
            clips.proj,
            states[t],
            None if record.projections is None else record.projections[t],
        )
    return record._replace(memory=memory)


class SequenceClippedLstm(torch.autograd.Function):
    """
    A layer's directions over a whole sequence: gates (directions, timesteps, batch, 4 * cells) =
    x W_ih + b, w_hh, w_hr. Then the state and memory before the first step, running_at (timesteps,
    1, batch, 1), `Clips`, `PointwiseSteps` -> (the state after each step (timesteps,
    directions, batch, proj), the memory after the last (directions, batch, cells)).

    Forward: per step the recurrent matmul, the cell's pointwise step, the projection and the
    state's pointwise step. For the backward it keeps, per position and direction, the 4 * cells
    activated gates and the cells of memory before the step (and with a projection clip the
    projection before it): 5 * cells values, where autograd through the reference loop keeps
    about 8 * cells. The memory after the step, its tanh and the projection's input
    o * tanh(memory) are recomputed in the backward's pointwise step from what it reads anyway.

    Backward: per step the two matmuls that carry the gradient back in time and two pointwise
    steps; then W_hh's and W_hr's gradients as one matmul each over every step's rows. The
    gates' gradient is returned whole, so the autograd of x W_ih + b gives W_ih, the bias and
    the inputs theirs in one matmul each. Under autocast the backward's matmuls run in the
    forward's matmul dtype, its pointwise work in the memory's. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, gates, w_hh, w_hr, state0, memory0, running_at, clips, steps):  # type: ignore[override]
        with torch.autocast(gates.device.type, enabled=False):
            record = forward_steps(
                gates, w_hh, w_hr, state0, memory0, running_at, clips, steps, keep=True
            )
        ctx.save_for_backward(
            w_hh,
            w_hr,
            state0,
            running_at,
            record.states,
            record.activated,
            record.memories,
            record.projections,
        )
        ctx.clips, ctx.steps = clips, steps
        return record.states, record.memory

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_states, grad_memory):  # type: ignore[override]
        with torch.autocast(grad_states.device.type, enabled=False):
            grads = backward_steps(ctx, grad_states, grad_memory)
        return (*grads, None, None, None)


def backward_steps(ctx: Any, grad_states: torch.Tensor, grad_memory: torch.Tensor) -> tuple:
    """`SequenceClippedLstm.backward` -> the gradients of gates, w_hh, w_hr, state0, memory0."""
    w_hh, w_hr, state0, running_at, states, activated, memories, projections = ctx.saved_tensors
    clips, steps = ctx.clips, ctx.steps
    timesteps, directions, batch, proj = states.shape
    matmul_dtype = states.dtype
    w_hh_mm, w_hr_mm = w_hh.to(matmul_dtype), w_hr.to(matmul_dtype)
    grad_states, grad_memory = grad_states.contiguous(), grad_memory.contiguous()
    grad_projections = torch.empty_like(states)
    # direction-major, for one matmul per direction over all steps: (directions, timesteps, ...)
    grad_gates = activated.new_empty(directions, timesteps, batch, activated.size(-1))
    hidden = (  # the projection's input, for W_hr's gradient
        activated.new_empty(directions, timesteps, batch, memories.size(-1))
        if ctx.needs_input_grad[2]
        else None
    )
    grad_state = torch.zeros_like(states[0])
    for t in reversed(range(timesteps)):
        kept = steps.state_backward(
            grad_state,
            grad_states[t],
            None if projections is None else projections[t],
            running_at[t],
            clips.proj,
            grad_projections[t],
        )
        grad_memory = steps.cell_backward(
            activated[t],
            memories[t],
            torch.bmm(grad_projections[t], w_hr_mm),
            grad_memory,
            running_at[t],
            clips.cell,
            grad_gates[:, t],
            None if hidden is None else hidden[:, t],
        )
        grad_state = torch.baddbmm(kept, grad_gates[:, t], w_hh_mm)

    def direction_major(time_major: torch.Tensor) -> torch.Tensor:
        return time_major.transpose(0, 1).reshape(directions, timesteps * batch, -1)

    def weight_grad(
        grads: torch.Tensor, values: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        """One matmul over every step's rows (directions, rows, out) and (directions, rows, in)
        -> (directions, out, in)."""
        return torch.bmm(grads.transpose(1, 2), values).to(weight.dtype)

    rows = directions, timesteps * batch, -1
    grad_w_hh = grad_w_hr = None
    if ctx.needs_input_grad[1]:
        previous_states = torch.cat((state0.to(matmul_dtype).unsqueeze(0), states[:-1]))
        grad_w_hh = weight_grad(grad_gates.view(rows), direction_major(previous_states), w_hh)
    if hidden is not None:
        grad_w_hr = weight_grad(direction_major(grad_projections), hidden.view(rows), w_hr)
    return grad_gates, grad_w_hh, grad_w_hr, grad_state.to(state0.dtype), grad_memory
