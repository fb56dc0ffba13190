"""The reference clipped LSTM-with-projection: a plain PyTorch time loop, differentiated by
autograd. It defines what every other path computes (the CPU fast path,
`elmo_plugin.cpu.packed_clipped_lstm`, and the GPU's whole-sequence function,
`modules/sequence_clipped_lstm.py`, are tested against it). It runs where neither does: on CPUs
for other dtypes or under autocast, where the C++ loops cannot be built, and with `cpu_loop:
"reference"`."""

from typing import Optional

import torch

from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, LstmWeights


def lstm_step(
    input_gates: torch.Tensor,
    previous: LstmState,
    weights: LstmWeights,
    clips: Clips,
    running: torch.Tensor,
) -> LstmState:
    """One step for all directions at once: input_gates (directions, batch, 4 * cells) = x W_ih
    + b, the `previous` state, running (1, batch, 1) bool: the rows still within their length
    (the others keep `previous`) -> the new state."""
    state, memory = previous
    gates = torch.baddbmm(input_gates, state, weights.w_hh.transpose(1, 2))
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
    new_memory = torch.addcmul(
        torch.sigmoid(forget_gate) * memory, torch.sigmoid(input_gate), torch.tanh(candidate)
    )
    if clips.cell is not None:
        new_memory = new_memory.clamp(-clips.cell, clips.cell)
    hidden = torch.sigmoid(output_gate) * torch.tanh(new_memory)
    new_state = torch.bmm(hidden, weights.w_hr.transpose(1, 2))
    if clips.proj is not None:
        new_state = new_state.clamp(-clips.proj, clips.proj)
    # (under bf16 autocast the state stays bf16 as the matmul makes it, the memory float32)
    return LstmState(
        torch.where(running, new_state, state.to(new_state.dtype)),
        torch.where(running, new_memory, memory),
    )


def clipped_lstm(
    inputs: torch.Tensor,
    weights: LstmWeights,
    lengths: torch.Tensor,
    clips: Clips,
    initial: Optional[LstmState] = None,
) -> tuple[torch.Tensor, LstmState]:
    """Each direction's LSTM with projection, memory clipped to +-clips.cell and state to
    +-clips.proj at every step. Inputs (directions, batch, timesteps, dim), rows in any order,
    lengths (batch,), `initial` to start from (None: zero) -> (outputs (directions, batch,
    timesteps, proj), zero past each length; the state at each row's last position, `initial`
    for a row of length 0). Every step runs over the whole batch: the same shapes at every step
    and no host synchronization."""
    directions, batch, timesteps, _ = inputs.shape
    previous = initial if initial is not None else initial_state(inputs, weights)
    running = torch.arange(timesteps, device=lengths.device) < lengths.unsqueeze(1)
    running_at = running.t().reshape(timesteps, 1, batch, 1).unbind(0)  # views, no copies
    outputs = []
    for step_gates, running_now in zip(
        input_gates_by_step(inputs, weights), running_at, strict=True
    ):
        previous = lstm_step(step_gates, previous, weights, clips, running_now)
        outputs.append(previous.state)
    if not outputs:
        return inputs.new_zeros(directions, batch, 0, weights.w_hr.size(1)), LstmState(*previous)
    stacked = torch.stack(outputs, dim=2)
    return stacked * running.unsqueeze(-1).to(stacked.dtype), LstmState(*previous)


def initial_state(inputs: torch.Tensor, weights: LstmWeights) -> LstmState:
    """Zero state for (directions, batch, ...) inputs. The memory cell is kept at least in
    float32, also when bf16 autocast makes the inputs and gates bf16: it accumulates over every
    step, where bf16's 8-bit mantissa would lose the small updates."""
    directions, batch = inputs.shape[:2]
    proj, cells = weights.w_hr.shape[1:]
    memory_dtype = torch.promote_types(inputs.dtype, torch.float32)
    return LstmState(
        inputs.new_zeros(directions, batch, proj),
        inputs.new_zeros(directions, batch, cells, dtype=memory_dtype),
    )


def input_gates(inputs: torch.Tensor, weights: LstmWeights) -> torch.Tensor:
    """(directions, batch, timesteps, dim) -> (directions, timesteps, batch, 4 * cells): every
    x W_ih + b in one batched matmul."""
    directions, batch, timesteps, dim = inputs.shape
    time_major = inputs.transpose(1, 2).reshape(directions, -1, dim)
    gates = torch.baddbmm(weights.bias, time_major, weights.w_ih.transpose(1, 2))
    return gates.view(directions, timesteps, batch, gates.size(-1))


def input_gates_by_step(inputs: torch.Tensor, weights: LstmWeights) -> tuple[torch.Tensor, ...]:
    """(directions, batch, timesteps, dim) -> per timestep (directions, batch, 4 * cells)."""
    # One tensor per step: the backward of unbind stacks the step gradients once, where
    # indexing a step of the whole tensor would add a full-size gradient at every step.
    return input_gates(inputs, weights).unbind(dim=1)
