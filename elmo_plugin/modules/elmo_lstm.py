"""Seq2SeqEncoder `elmo_lstm`: ELMo's two independent stacks of projected LSTMs."""

from collections.abc import Sequence
from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.cpu import packed_clipped_lstm as cpu_fast_path
from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, stacked_weights
from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer, LayerState
from elmo_plugin.modules.clipped_lstm import clipped_lstm, initial_state
from elmo_plugin.modules.device_paths import takes_cpu_path, takes_gpu_path
from elmo_plugin.modules.directions import both_directions, join_directions, reverse_within_length
from elmo_plugin.modules.sequence_clipped_lstm import pointwise_steps, sequence_clipped_lstm

CPU_LOOPS = ("fast", "reference")


@Seq2SeqEncoder.register("elmo_lstm")
class ElmoLstmContextualizer(BiLmContextualizer):
    """
    inputs (batch, timesteps, input_dim), mask (batch, timesteps) ->
    top layer (batch, timesteps, 2 * input_dim) = [forward; backward], or with
    `return_all_layers` a list of `num_layers` such tensors. Padding positions are zero.

    Forward and backward stacks never see each other's states, so neither can peek at the
    token it predicts. Each layer is an LSTM projected back to `input_dim`, with optional
    cell / projection clipping, dropout on its input, and a residual connection from the second
    layer up. Stateless: every batch starts from zero state (`stream_layers` carries state for
    stateful training; a carried state that is not detached passes its gradient back).

    Without clipping each direction is torch's fused `torch.nn.LSTM`. With clipping, float32 CPU
    tensors outside autocast take the CPU fast path (`elmo_plugin.cpu.packed_clipped_lstm`: C++
    time loops over packed sequences, oneDNN matmuls) unless `cpu_loop` says otherwise or its
    C++ loops cannot be built (one warning). On CUDA a layer's directions run as one autograd
    function over the whole sequence (`modules/sequence_clipped_lstm.py`): every step over the
    whole batch, the data gradients step by step backwards, then each weight's gradient in one
    matmul over all steps. Its pointwise steps fused by torch.compile (`compile_on_gpu`, where
    Triton is installed). Everything else runs the reference loop (`modules/clipped_lstm.py`):
    CPUs for other dtypes and under autocast, other devices. All are tested equal to the
    reference loop. Under bf16 autocast the memory cells stay float32.

    # Parameters

    input_dim : `int`
        The size of each token vector in and out (each LSTM projects back to it).
    cell_size : `int`
        Memory cells per LSTM (allennlp's `Elmo` calls it `cell_size`, options.json `lstm.dim`).
        Its old name `hidden_dim` is still read (archives made before the rename use it).
    num_layers : `int`, optional (default = `2`)
        Layers per direction.
    cell_clip : `float`, optional (default = `None`)
        Clip each memory cell to +-cell_clip at every step; None: no clipping.
    proj_clip : `float`, optional (default = `None`)
        Clip each projected state to +-proj_clip at every step; None: no clipping.
    dropout : `float`, optional (default = `0.0`)
        Dropout on each layer's input, a mask drawn for each direction.
    return_all_layers : `bool`, optional (default = `False`)
        Return every layer's output instead of the top one.
    compile_on_gpu : `bool`, optional (default = `True`)
        On CUDA with Triton, fuse the clipped LSTM's pointwise step work (forward and backward)
        with torch.compile; the first batches compile. Where a compiled step fails (Triton
        cannot build it, or it recompiles past torch._dynamo's `recompile_limit`), one warning
        names the error and the plain steps run from then on.
    cpu_loop : `str`, optional (default = `"fast"`)
        The clipped LSTM on CPU tensors: "fast", the C++ fast path for float32 outside autocast
        (the reference loop for other dtypes, under autocast, or where it cannot be built);
        "reference", the plain PyTorch loop that defines it (slower; for checking). CUDA always
        runs the whole-sequence function, other devices the reference loop.
    """

    renamed_keys = {"hidden_dim": "cell_size"}
    dropped_values = {"cpu_loop": "gpu"}  # it ran the GPU's function on a CPU

    def __init__(
        self,
        input_dim: int,
        cell_size: int,
        num_layers: int = 2,
        cell_clip: Optional[float] = None,
        proj_clip: Optional[float] = None,
        dropout: float = 0.0,
        return_all_layers: bool = False,
        compile_on_gpu: bool = True,
        cpu_loop: str = "fast",
    ) -> None:
        super().__init__(input_dim, num_layers, return_all_layers)
        if cpu_loop not in CPU_LOOPS:
            raise ConfigurationError(
                f'elmo_lstm: cpu_loop must be "fast" or "reference", got {cpu_loop!r}'
            )
        self.cell_size = cell_size
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.compile_on_gpu = compile_on_gpu
        self.cpu_loop = cpu_loop
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

    def _clips(self) -> Clips:
        return Clips(self.cell_clip, self.proj_clip)

    def _runs_fast(self, inputs: torch.Tensor) -> bool:
        """Whether the clipped LSTM runs the CPU fast path on these inputs."""
        return (
            self.cpu_loop == "fast"
            and takes_cpu_path(inputs.device)
            and cpu_fast_path.runs_fast(inputs)
        )

    def _reference(
        self,
        lstms: Sequence[torch.nn.Module],
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        initial: Optional[LstmState] = None,
    ) -> tuple[torch.Tensor, LstmState]:
        """Where the CPU fast path does not run: where the GPU's path runs (`takes_gpu_path`)
        the whole-sequence function, its pointwise steps compiled where they can be; elsewhere
        the reference loop."""
        weights = stacked_weights(lstms)
        if takes_gpu_path(inputs.device):
            steps = pointwise_steps(inputs.device, self.compile_on_gpu)
            return sequence_clipped_lstm(inputs, weights, lengths, self._clips(), initial, steps)
        return clipped_lstm(inputs, weights, lengths, self._clips(), initial)

    def _run_layer(
        self, lstms: Sequence[torch.nn.Module], inputs: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """inputs (directions, batch, timesteps, input_dim), batch sorted by decreasing
        `lengths` -> (directions, batch, timesteps, input_dim), each direction through its LSTM."""
        if self.cell_clip is None and self.proj_clip is None:
            return torch.stack(
                [lstm(direction)[0] for lstm, direction in zip(lstms, inputs, strict=False)]
            )
        if self._runs_fast(inputs):
            weights = stacked_weights(lstms)
            return cpu_fast_path.packed_clipped_lstm(inputs, weights, lengths, self._clips())[0]
        return self._reference(lstms, inputs, lengths)[0]

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
        for index, lstms in enumerate(zip(self.forward_layers, self.backward_layers, strict=False)):
            output = self._run_layer(lstms, self._dropout(layer_input), lengths)
            if index > 0:
                output = output + layer_input
            layers.append(join_directions(output, reverse_index, keep)[restore])
            layer_input = output
        return layers

    supports_state = True

    def _run_stream_layer(
        self,
        lstms: Sequence[torch.nn.Module],
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        initial: LayerState,
    ) -> tuple[torch.Tensor, LayerState]:
        """inputs (directions, batch, timesteps, input_dim) in any row order, `initial` (state,
        memory) -> (outputs (directions, batch, timesteps, input_dim), the (state, memory) at
        each row's last position)."""
        initial = LstmState(*initial)
        if not self._runs_fast(inputs):
            return self._reference(lstms, inputs, lengths, initial)
        order = torch.argsort(lengths, descending=True, stable=True)  # the fast path's row order
        restore = torch.argsort(order)
        outputs, final = cpu_fast_path.packed_clipped_lstm(
            inputs[:, order],
            stacked_weights(lstms),
            lengths[order],
            self._clips(),
            LstmState(*(part[:, order] for part in initial)),
        )
        return outputs[:, restore], LstmState(*(part[:, restore] for part in final))

    def stream_layers(
        self, inputs: torch.Tensor, mask: torch.BoolTensor, state: Optional[list[LayerState]] = None
    ) -> tuple[list[torch.Tensor], list[LayerState]]:
        """Stateful streams (bilm-tf's training): inputs (2, batch, timesteps, input_dim), each
        direction's own text in its reading order, right-padded as `mask` (batch, timesteps)
        says. `state`: every layer's (state, memory) to start from (`initial_state` shapes),
        None for zero. -> (every layer's (batch, timesteps, 2 * input_dim) [forward; backward]
        output, each direction at its own input's positions, zero at padding. Then every layer's
        (state, memory) at each row's last position, the given one for a row without tokens).
        Clipped or not, each layer runs the path `all_layers` runs for clipped layers."""
        keep = mask.unsqueeze(-1).to(inputs.dtype)
        lengths = mask.sum(dim=1)
        layer_input, layers, final = inputs, [], []
        for index, lstms in enumerate(zip(self.forward_layers, self.backward_layers, strict=False)):
            initial = (
                state[index]
                if state is not None
                else initial_state(layer_input, stacked_weights(lstms))
            )
            output, last = self._run_stream_layer(
                lstms, self._dropout(layer_input), lengths, initial
            )
            if index > 0:
                output = output + layer_input
            layers.append(torch.cat([output[0], output[1]], dim=-1) * keep)
            final.append(last)
            layer_input = output
        return layers, final
