"""Seq2SeqEncoder `elmo_lstm`: ELMo's two independent stacks of projected LSTMs."""
from typing import List, Optional, Union

import torch
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder


def reverse_within_length(lengths: torch.Tensor, timesteps: int) -> torch.Tensor:
    """(batch,) lengths -> (batch, timesteps) index that reverses each sequence's real tokens
    and leaves padding in place. Applying it twice is the identity."""
    positions = torch.arange(timesteps, device=lengths.device)
    reversed_positions = lengths.unsqueeze(1) - 1 - positions
    return torch.where(reversed_positions >= 0, reversed_positions, positions)


def gather_timesteps(inputs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """inputs (batch, timesteps, dim), index (batch, timesteps) -> reordered inputs."""
    return inputs.gather(1, index.unsqueeze(-1).expand_as(inputs))


def clipped_lstm(
    inputs: torch.Tensor, lstm: torch.nn.LSTM, cell_clip: Optional[float], proj_clip: Optional[float]
) -> torch.Tensor:
    """The same LSTM-with-projection as `lstm(inputs)`, from zero state, with the memory cell
    clipped to +-cell_clip and the projected output to +-proj_clip at every step.
    inputs (batch, timesteps, input_dim) -> (batch, timesteps, proj_size)."""
    batch_size, timesteps, _ = inputs.shape
    input_gates = torch.nn.functional.linear(inputs, lstm.weight_ih_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
    state = inputs.new_zeros(batch_size, lstm.proj_size)
    memory = inputs.new_zeros(batch_size, lstm.hidden_size)
    outputs = []
    for step in range(timesteps):
        gates = input_gates[:, step] + torch.nn.functional.linear(state, lstm.weight_hh_l0)
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)
        memory = torch.sigmoid(forget_gate) * memory + torch.sigmoid(input_gate) * torch.tanh(candidate)
        if cell_clip is not None:
            memory = memory.clamp(-cell_clip, cell_clip)
        state = torch.nn.functional.linear(torch.sigmoid(output_gate) * torch.tanh(memory), lstm.weight_hr_l0)
        if proj_clip is not None:
            state = state.clamp(-proj_clip, proj_clip)
        outputs.append(state)
    return torch.stack(outputs, dim=1)


@Seq2SeqEncoder.register("elmo_lstm")
class ElmoLstm(Seq2SeqEncoder):
    """
    inputs (batch, timesteps, input_dim), mask (batch, timesteps) ->
    top layer (batch, timesteps, 2 * input_dim) = [forward; backward], or with
    `return_all_layers` a list of `num_layers` such tensors. Padding positions are zero.

    Forward and backward stacks never see each other's states, so neither can peek at the
    token it predicts. Each layer is an LSTM with `hidden_dim` cells projected back to
    `input_dim`, with optional cell / projection clipping, dropout on its input, and a residual
    connection from the second layer up. Stateless: every batch starts from zero state.
    """

    def __init__(
        self,
        input_dim: int,
        hidden_dim: int,
        num_layers: int,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
        dropout: float = 0.0,
        return_all_layers: bool = False,
    ) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self._return_all_layers = return_all_layers
        self._dropout = torch.nn.Dropout(dropout)
        self.forward_layers = self._make_stack()
        self.backward_layers = self._make_stack()

    def _make_stack(self) -> torch.nn.ModuleList:
        return torch.nn.ModuleList(
            torch.nn.LSTM(self.input_dim, self.hidden_dim, proj_size=self.input_dim, batch_first=True)
            for _ in range(self.num_layers)
        )

    def get_input_dim(self) -> int:
        return self.input_dim

    def get_output_dim(self) -> int:
        return 2 * self.input_dim

    def is_bidirectional(self) -> bool:
        return True

    def _run_layer(self, lstm: torch.nn.LSTM, inputs: torch.Tensor) -> torch.Tensor:
        if self.cell_clip is None and self.proj_clip is None:
            return lstm(inputs)[0]
        return clipped_lstm(inputs, lstm, self.cell_clip, self.proj_clip)

    def all_layers(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> List[torch.Tensor]:
        """Every layer's (batch, timesteps, 2 * input_dim) output, bottom first."""
        reverse_index = reverse_within_length(mask.sum(dim=1), mask.size(1))
        keep = mask.unsqueeze(-1).to(inputs.dtype)
        forward_input, backward_input = inputs, gather_timesteps(inputs, reverse_index)
        layers = []
        for index, (forward_lstm, backward_lstm) in enumerate(zip(self.forward_layers, self.backward_layers)):
            forward_output = self._run_layer(forward_lstm, self._dropout(forward_input))
            backward_output = self._run_layer(backward_lstm, self._dropout(backward_input))
            if index > 0:
                forward_output = forward_output + forward_input
                backward_output = backward_output + backward_input
            layers.append(
                torch.cat([forward_output, gather_timesteps(backward_output, reverse_index)], dim=-1) * keep
            )
            forward_input, backward_input = forward_output, backward_output
        return layers

    def forward(
        self, inputs: torch.Tensor, mask: torch.BoolTensor
    ) -> Union[torch.Tensor, List[torch.Tensor]]:
        layers = self.all_layers(inputs, mask)
        return layers if self._return_all_layers else layers[-1]
