"""Seq2SeqEncoder `elmo_lstm`: ELMo's two independent stacks of projected LSTMs."""

import functools
from collections.abc import Callable, Sequence
from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer, LayerState
from elmo_plugin.modules.directions import both_directions, join_directions, reverse_within_length
from elmo_plugin.cpu.packed_clipped_lstm import packed_clipped_lstm


def stacked_parameter(lstms: Sequence[torch.nn.LSTM], name: str) -> torch.Tensor:
    """The named parameter of each direction's LSTM in torch's layout: (directions, ...)."""
    return torch.stack([getattr(lstm, name) for lstm in lstms])


def stacked_weight(lstms: Sequence[torch.nn.LSTM], name: str) -> torch.Tensor:
    """The named weight of each direction's LSTM, transposed for x @ W: (directions, in, out)."""
    return stacked_parameter(lstms, name).transpose(1, 2)


def lstm_step(
    input_gates: torch.Tensor,
    state: torch.Tensor,
    memory: torch.Tensor,
    recurrent: torch.Tensor,
    projection: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """One clipped LSTM-with-projection step for all directions at once: input_gates
    (directions, batch, 4 * cells) = x W_ih + b, state (directions, batch, proj), memory
    (directions, batch, cells), recurrent (directions, proj, 4 * cells), projection
    (directions, cells, proj) -> the new (state, memory)."""
    gates = torch.baddbmm(input_gates, state, recurrent)
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
    memory = torch.addcmul(
        torch.sigmoid(forget_gate) * memory, torch.sigmoid(input_gate), torch.tanh(candidate)
    )
    if cell_clip is not None:
        memory = memory.clamp(-cell_clip, cell_clip)
    state = torch.bmm(torch.sigmoid(output_gate) * torch.tanh(memory), projection)
    if proj_clip is not None:
        state = state.clamp(-proj_clip, proj_clip)
    return state, memory


@functools.cache
def compiled_lstm_step() -> Callable:
    """`lstm_step` with its gate arithmetic fused by torch.compile (CUDA with Triton only), made
    on first use; `dynamic=None` lets a second batch size switch it to a dynamic batch dimension."""
    return torch.compile(lstm_step, dynamic=None)


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


def packed_weights(lstms: Sequence[torch.nn.LSTM]) -> tuple[torch.Tensor, ...]:
    """(w_ih, bias, w_hh, w_hr) of all directions as `PackedClippedLstm` takes them: torch's
    layout, stacked (the gradients reach each weight contiguous)."""
    bias = torch.stack([lstm.bias_ih_l0 + lstm.bias_hh_l0 for lstm in lstms]).unsqueeze(1)
    names = ("weight_ih_l0", "weight_hh_l0", "weight_hr_l0")
    w_ih, w_hh, w_hr = (stacked_parameter(lstms, name) for name in names)
    return w_ih, bias, w_hh, w_hr


def can_pack(inputs: torch.Tensor) -> bool:
    """The packed fast path takes float32 CPU tensors outside autocast (bf16 autocast keeps the
    memory cells float32, which the step loop does)."""
    return (
        inputs.device.type == "cpu"
        and inputs.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
    )


def initial_state(
    inputs: torch.Tensor, lstms: Sequence[torch.nn.LSTM]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero (state, memory) for (directions, batch, ...) inputs. The memory cell is kept at least
    in float32, also when bf16 autocast makes the inputs and gates bf16: it accumulates over
    every step, where bf16's 8-bit mantissa would lose the small updates."""
    directions, batch = inputs.shape[:2]
    state = inputs.new_zeros(directions, batch, lstms[0].proj_size)
    memory_dtype = torch.promote_types(inputs.dtype, torch.float32)
    return state, inputs.new_zeros(directions, batch, lstms[0].hidden_size, dtype=memory_dtype)


def input_gates_by_step(
    inputs: torch.Tensor, lstms: Sequence[torch.nn.LSTM]
) -> tuple[torch.Tensor, ...]:
    """(directions, batch, timesteps, dim) -> per timestep (directions, batch, 4 * cells): every
    x W_ih + b_ih + b_hh in one batched matmul."""
    directions, batch, timesteps, dim = inputs.shape
    bias = torch.stack([lstm.bias_ih_l0 + lstm.bias_hh_l0 for lstm in lstms]).unsqueeze(1)
    time_major = inputs.transpose(1, 2).reshape(directions, -1, dim)
    input_gates = torch.baddbmm(bias, time_major, stacked_weight(lstms, "weight_ih_l0"))
    # One tensor per step: the backward of unbind stacks the step gradients once, where
    # indexing a step of the whole tensor would add a full-size gradient at every step.
    return input_gates.view(directions, timesteps, batch, -1).unbind(dim=1)


def clipped_lstm(
    inputs: torch.Tensor,
    lstms: Sequence[torch.nn.LSTM],
    lengths: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
) -> torch.Tensor:
    """Each direction's LSTM-with-projection as `lstm(inputs[d])`, from zero state, with the
    memory cell clipped to +-cell_clip and the projected output to +-proj_clip at every step;
    one time loop for all directions. inputs (directions, batch, timesteps, dim), batch sorted by
    decreasing `lengths` (batch,) -> (directions, batch, timesteps, proj_size), zero past each
    length: a sequence leaves the loop when it ends (least work; the CPU path)."""
    directions, batch, timesteps, _ = inputs.shape
    input_gates = input_gates_by_step(inputs, lstms)
    recurrent, projection = (
        stacked_weight(lstms, "weight_hh_l0"),
        stacked_weight(lstms, "weight_hr_l0"),
    )
    state, memory = initial_state(inputs, lstms)
    active = (lengths > torch.arange(timesteps, device=lengths.device).unsqueeze(1)).sum(dim=1)
    outputs = []
    for step, size in enumerate(active[active > 0].tolist()):  # size: sequences longer than step
        state, memory = lstm_step(
            input_gates[step][:, :size],
            state[:, :size],
            memory[:, :size],
            recurrent,
            projection,
            cell_clip,
            proj_clip,
        )
        outputs.append(torch.nn.functional.pad(state, (0, 0, 0, batch - size)))
    outputs += [state.new_zeros(directions, batch, lstms[0].proj_size)] * (timesteps - len(outputs))
    return torch.stack(outputs, dim=2)


def clipped_lstm_fixed_shape(
    inputs: torch.Tensor,
    lstms: Sequence[torch.nn.LSTM],
    lengths: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    step: Callable = lstm_step,
) -> torch.Tensor:
    """`clipped_lstm` with every step over the whole batch (the GPU path): the same shapes at
    every step and no host synchronization, so `step` can be a compiled kernel. A sequence's
    steps past its length compute unused values that are zeroed in the output, so neither
    they nor their (zero) gradients reach any real position."""
    timesteps = inputs.size(2)
    outputs, _ = lstm_steps(inputs, lstms, initial_state(inputs, lstms), cell_clip, proj_clip, step)
    keep = torch.arange(timesteps, device=lengths.device) < lengths.unsqueeze(
        1
    )  # (batch, timesteps)
    return outputs * keep.unsqueeze(-1).to(outputs.dtype)


def lstm_steps(
    inputs: torch.Tensor,
    lstms: Sequence[torch.nn.LSTM],
    initial: tuple[torch.Tensor, torch.Tensor],
    cell_clip: Optional[float],
    proj_clip: Optional[float],
    step: Callable = lstm_step,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Every step over the whole batch from `initial` (state, memory) as `initial_state` shapes
    them: inputs (directions, batch, timesteps, dim) -> (outputs (directions, batch, timesteps,
    proj_size), padding not zeroed; the (state, memory) after the last step)."""
    input_gates = input_gates_by_step(inputs, lstms)
    recurrent, projection = (
        stacked_weight(lstms, "weight_hh_l0"),
        stacked_weight(lstms, "weight_hr_l0"),
    )
    state, memory = initial
    outputs = []
    for gates in input_gates:
        state, memory = step(gates, state, memory, recurrent, projection, cell_clip, proj_clip)
        outputs.append(state)
    return torch.stack(outputs, dim=2), (state, memory)


@Seq2SeqEncoder.register("elmo_lstm")
class ElmoLstmContextualizer(BiLmContextualizer):
    """
    inputs (batch, timesteps, input_dim), mask (batch, timesteps) ->
    top layer (batch, timesteps, 2 * input_dim) = [forward; backward], or with
    `return_all_layers` a list of `num_layers` such tensors. Padding positions are zero.

    Forward and backward stacks never see each other's states, so neither can peek at the
    token it predicts. Each layer is an LSTM with `cell_size` memory cells (allennlp's `Elmo`
    calls it `cell_size`, options.json `lstm.dim`) projected back to `input_dim`, with optional
    cell / projection clipping, dropout on its input, and a residual connection from the second
    layer up. Stateless: every batch starts from zero state. `hidden_dim` is the old name of
    `cell_size`, still accepted (archives made before the rename use it).

    With clipping, CPUs run a time loop in which finished sequences leave the batch; GPUs run
    every step over the whole batch with the step's gate arithmetic compiled into fused kernels
    by `torch.compile` (`compile_on_gpu`, where Triton is installed). Under bf16 autocast the
    memory cells stay float32.
    """

    def __init__(
        self,
        input_dim: int,
        cell_size: Optional[int] = None,
        num_layers: int = 2,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
        dropout: float = 0.0,
        return_all_layers: bool = False,
        compile_on_gpu: bool = True,
        hidden_dim: Optional[int] = None,
    ) -> None:
        super().__init__(input_dim, num_layers, return_all_layers)
        if (cell_size is None) == (hidden_dim is None):
            raise ConfigurationError(
                "elmo_lstm: give cell_size (hidden_dim is its old name), exactly once"
            )
        self.cell_size = cell_size if cell_size is not None else hidden_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.compile_on_gpu = compile_on_gpu
        self._dropout = torch.nn.Dropout(dropout)
        self.forward_layers = self._make_stack()
        self.backward_layers = self._make_stack()

    def _make_stack(self) -> torch.nn.ModuleList:
        return torch.nn.ModuleList(
            torch.nn.LSTM(
                self.input_dim, self.cell_size, proj_size=self.input_dim, batch_first=True
            )
            for _ in range(self.num_layers)
        )

    def _run_layer(
        self, lstms: Sequence[torch.nn.LSTM], inputs: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """inputs (directions, batch, timesteps, input_dim), batch sorted by decreasing
        `lengths` -> (directions, batch, timesteps, input_dim), each direction through its LSTM."""
        if self.cell_clip is None and self.proj_clip is None:
            return torch.stack([lstm(direction)[0] for lstm, direction in zip(lstms, inputs)])
        if can_pack(inputs):
            return packed_clipped_lstm(
                inputs, packed_weights(lstms), lengths, self.cell_clip, self.proj_clip
            )[0]
        if inputs.device.type == "cpu":
            return clipped_lstm(inputs, lstms, lengths, self.cell_clip, self.proj_clip)
        # On a GPU the loop is launch-bound: fixed shapes, no host syncs, fused gate kernels.
        compile_step = self.compile_on_gpu and can_compile_step(inputs.device)
        step = compiled_lstm_step() if compile_step else lstm_step
        return clipped_lstm_fixed_shape(
            inputs, lstms, lengths, self.cell_clip, self.proj_clip, step
        )

    def all_layers(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> list[torch.Tensor]:
        """Every layer's (batch, timesteps, 2 * input_dim) output, bottom first. Runs on the batch
        sorted by decreasing length, both directions stacked (the backward one reversed within
        length); dropout draws its own mask for each direction."""
        lengths = mask.sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        lengths = lengths[order]
        reverse_index = reverse_within_length(lengths, mask.size(1))
        keep = mask[order].unsqueeze(-1).to(inputs.dtype)
        sorted_inputs = inputs[order]
        layer_input = both_directions(sorted_inputs, reverse_index)
        restore = torch.argsort(order)
        layers = []
        for index, lstms in enumerate(zip(self.forward_layers, self.backward_layers)):
            output = self._run_layer(lstms, self._dropout(layer_input), lengths)
            if index > 0:
                output = output + layer_input
            layers.append(join_directions(output, reverse_index, keep)[restore])
            layer_input = output
        return layers

    supports_state = True

    def _run_stream_layer(
        self,
        lstms: Sequence[torch.nn.LSTM],
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        initial: LayerState,
    ) -> tuple[torch.Tensor, LayerState]:
        """inputs (directions, batch, timesteps, input_dim) in any row order, `initial` (state,
        memory) -> (outputs (directions, batch, timesteps, input_dim), the (state, memory) after
        the last step)."""
        if not can_pack(inputs) or any(part.requires_grad for part in initial):
            return lstm_steps(inputs, lstms, initial, self.cell_clip, self.proj_clip)
        order = torch.argsort(lengths, descending=True, stable=True)  # the packed LSTM's row order
        restore = torch.argsort(order)
        outputs, final = packed_clipped_lstm(
            inputs[:, order],
            packed_weights(lstms),
            lengths[order],
            self.cell_clip,
            self.proj_clip,
            tuple(part[:, order] for part in initial),
        )
        return outputs[:, restore], tuple(part[:, restore] for part in final)

    def stream_layers(
        self, inputs: torch.Tensor, mask: torch.BoolTensor, state: Optional[list[LayerState]] = None
    ) -> tuple[list[torch.Tensor], list[LayerState]]:
        """Stateful streams (bilm-tf's training): inputs (2, batch, timesteps, input_dim), each
        direction's own text in its reading order, right-padded as `mask` (batch, timesteps)
        says; `state`: every layer's (state, memory) to start from (`initial_state` shapes),
        None for zero. -> (every layer's (batch, timesteps, 2 * input_dim) [forward; backward]
        output, each direction at its own input's positions, zero at padding; every layer's
        state after the last timestep, meaningful for rows without padding).
        float32 CPU runs the packed LSTM (a row's state is then the one at its own last
        position), other devices and dtypes the step loop."""
        keep = mask.unsqueeze(-1).to(inputs.dtype)
        lengths = mask.sum(dim=1)
        layer_input, layers, final = inputs, [], []
        for index, lstms in enumerate(zip(self.forward_layers, self.backward_layers)):
            initial = state[index] if state is not None else initial_state(layer_input, lstms)
            output, last = self._run_stream_layer(
                lstms, self._dropout(layer_input), lengths, initial
            )
            if index > 0:
                output = output + layer_input
            layers.append(torch.cat([output[0], output[1]], dim=-1) * keep)
            final.append(last)
            layer_input = output
        return layers, final
