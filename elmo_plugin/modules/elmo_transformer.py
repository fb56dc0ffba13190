"""Seq2SeqEncoder `elmo_transformer`: two causal transformer stacks (forward and backward).

Both directions are computed together: the backward stack reads each sentence reversed within
its length, so both stacks are causal and padding sits at the end for both. Their parameters
are stacked along a leading direction axis (0 = forward, 1 = backward), so every projection is
one batched matmul for both directions and attention is one fused
`scaled_dot_product_attention(..., is_causal=True)` call.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer
from elmo_plugin.modules.directions import both_directions, join_directions, reverse_within_length

NUM_DIRECTIONS = 2
BACKWARD_POSITIONS = ("from_start", "from_end")
DROPOUT_RESOLUTION = 2**15  # CPU dropout rates are rounded to a multiple of 1 / this


def sinusoidal_positions(timesteps: int, dim: int) -> torch.Tensor:
    """(timesteps, dim) sinusoidal position encodings (Vaswani et al. 2017); sin on even
    features, cos on odd ones, as allennlp-models' `PositionalEncoding`."""
    position = torch.arange(timesteps, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    encoding = torch.zeros(timesteps, dim)
    encoding[:, 0::2] = torch.sin(position * frequency)
    encoding[:, 1::2] = torch.cos(position * frequency[: dim // 2])
    return encoding


def random_15_bit_integers(shape: torch.Size) -> torch.Tensor:
    """int16 tensor of `shape`, uniform on [0, 2**15), on CPU: four values per 64-bit random
    number from torch's default generator (so `torch.manual_seed` makes it reproducible)."""
    numel = math.prod(shape)
    words = torch.empty((numel + 3) // 4, dtype=torch.int64).random_()  # 63 random bits each
    words.bitwise_and_(0x7FFF7FFF7FFF7FFF)
    return words.view(torch.int16)[:numel].view(shape)


def fast_dropout(inputs: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout, as `F.dropout`. On CPU the keep mask comes from 15-bit random integers
    (p rounded to a multiple of 2**-15), about twice as fast as `F.dropout` forward + backward
    there; elsewhere `F.dropout` itself. Any shape in, same shape out."""
    if not training or p == 0.0:
        return inputs
    if inputs.device.type != "cpu" or p >= 1.0:
        return F.dropout(inputs, p, training=True)
    threshold = round(p * DROPOUT_RESOLUTION)
    keep = random_15_bit_integers(inputs.shape) >= threshold
    scale = DROPOUT_RESOLUTION / (DROPOUT_RESOLUTION - threshold)
    return inputs * keep.to(inputs.dtype).mul_(scale)


def directional_linear(
    inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """One matmul for both directions: inputs (2, n, in), weight (2, in, out), bias (2, 1, out)
    -> (2, n, out)."""
    return torch.baddbmm(bias, inputs, weight)


def directional_layer_norm(
    inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """Layer norm over the last dim with per-direction gain and bias:
    inputs (2, ..., dim), weight and bias (2, 1, dim) -> same shape as inputs."""
    normalized = F.layer_norm(inputs, inputs.shape[-1:], eps=1e-6)
    flat = normalized.view(normalized.size(0), -1, normalized.size(-1))
    return torch.addcmul(bias, flat, weight).view_as(inputs)


def directional_parameter(*shape: int, value: Optional[float] = None) -> torch.nn.Parameter:
    """A (2, *shape) parameter, filled with `value` (or left for `reset_parameters`)."""
    tensor = torch.empty(NUM_DIRECTIONS, *shape)
    if value is not None:
        tensor.fill_(value)
    return torch.nn.Parameter(tensor)


class DirectionalBlock(torch.nn.Module):
    """
    One pre-LN transformer block for both directions at once:
    x + dropout(attn(LN(x))), then x + dropout(FF(LN(x))) with FF = W2 dropout(relu(W1 x)).
    inputs (2, batch, timesteps, dim) -> same shape; attention is causal within each sequence.
    """

    def __init__(
        self,
        input_dim: int,
        feedforward_hidden_dim: int,
        num_heads: int,
        dropout: float,
        attention_dropout: float,
    ) -> None:
        super().__init__()
        self.input_dim, self.feedforward_hidden_dim = input_dim, feedforward_hidden_dim
        self.num_heads = num_heads
        self.attention_dropout = attention_dropout
        self.attention_norm_weight = directional_parameter(1, input_dim, value=1.0)
        self.attention_norm_bias = directional_parameter(1, input_dim, value=0.0)
        self.qkv_weight = directional_parameter(input_dim, 3 * input_dim)
        self.qkv_bias = directional_parameter(1, 3 * input_dim, value=0.0)
        self.output_weight = directional_parameter(input_dim, input_dim)
        self.output_bias = directional_parameter(1, input_dim, value=0.0)
        self.feedforward_norm_weight = directional_parameter(1, input_dim, value=1.0)
        self.feedforward_norm_bias = directional_parameter(1, input_dim, value=0.0)
        self.feedforward_in_weight = directional_parameter(input_dim, feedforward_hidden_dim)
        self.feedforward_in_bias = directional_parameter(1, feedforward_hidden_dim, value=0.0)
        self.feedforward_out_weight = directional_parameter(feedforward_hidden_dim, input_dim)
        self.feedforward_out_bias = directional_parameter(1, input_dim, value=0.0)
        self.dropout = dropout  # a rate; `fast_dropout` applies it
        self.reset_parameters()

    def extra_repr(self) -> str:
        return (
            f"directions=2, input_dim={self.input_dim}, "
            f"feedforward_hidden_dim={self.feedforward_hidden_dim}, num_heads={self.num_heads}, "
            f"dropout={self.dropout}, attention_dropout={self.attention_dropout}"
        )

    def reset_parameters(self) -> None:
        """Glorot-uniform matrices (query, key and value each as its own square matrix, as
        allennlp-models' transformer initializes them), per direction; zero biases."""
        for direction in range(NUM_DIRECTIONS):
            for matrix in self.qkv_weight.data[direction].chunk(3, dim=-1):
                torch.nn.init.xavier_uniform_(matrix)
            torch.nn.init.xavier_uniform_(self.output_weight.data[direction])
            torch.nn.init.xavier_uniform_(self.feedforward_in_weight.data[direction])
            torch.nn.init.xavier_uniform_(self.feedforward_out_weight.data[direction])

    def attention(self, inputs: torch.Tensor) -> torch.Tensor:
        """(2, batch, timesteps, dim) normalized inputs -> causal multi-head attention output,
        same shape, before the residual."""
        directions, batch_size, timesteps, dim = inputs.shape
        qkv = directional_linear(inputs.view(directions, -1, dim), self.qkv_weight, self.qkv_bias)
        # (2, batch, timesteps, 3, heads, head_dim) -> 3 x (2 * batch, heads, timesteps, head_dim)
        qkv = qkv.view(directions * batch_size, timesteps, 3, self.num_heads, dim // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        attended = F.scaled_dot_product_attention(
            query,
            key,
            value,
            dropout_p=self.attention_dropout if self.training else 0.0,
            is_causal=True,
        )
        attended = attended.transpose(1, 2).reshape(directions, batch_size * timesteps, dim)
        output = directional_linear(attended, self.output_weight, self.output_bias)
        return output.view(directions, batch_size, timesteps, dim)

    def feedforward(self, inputs: torch.Tensor) -> torch.Tensor:
        """(2, batch, timesteps, dim) normalized inputs -> position-wise FF output, same shape."""
        flat = inputs.view(inputs.size(0), -1, inputs.size(-1))
        hidden = F.relu(
            directional_linear(flat, self.feedforward_in_weight, self.feedforward_in_bias)
        )
        hidden = fast_dropout(hidden, self.dropout, self.training)
        output = directional_linear(hidden, self.feedforward_out_weight, self.feedforward_out_bias)
        return output.view_as(inputs)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        normalized = directional_layer_norm(
            inputs, self.attention_norm_weight, self.attention_norm_bias
        )
        inputs = inputs + fast_dropout(self.attention(normalized), self.dropout, self.training)
        normalized = directional_layer_norm(
            inputs, self.feedforward_norm_weight, self.feedforward_norm_bias
        )
        return inputs + fast_dropout(self.feedforward(normalized), self.dropout, self.training)


@Seq2SeqEncoder.register("elmo_transformer")
class ElmoTransformerContextualizer(BiLmContextualizer):
    """
    inputs (batch, timesteps, input_dim), mask (batch, timesteps) ->
    top layer (batch, timesteps, 2 * input_dim) = [forward; backward], or with
    `return_all_layers` a list of `num_layers` such tensors. Padding positions are zero.

    A forward stack in which each position attends only to itself and the past, and a separate
    backward stack in which it attends only to itself and the future, so neither direction can
    see the token it predicts. Sinusoidal positions are added once to the input after
    `input_dropout`; each layer is a pre-LN block (multi-head self-attention with
    `attention_dropout` on its weights, then a ReLU feed-forward of width `feedforward_hidden_dim`,
    each in a residual branch with `dropout`). The top layer gets a final layer norm, as in
    allennlp-models' `bidirectional_language_model_transformer`.

    The mask must be True on a prefix of each row (allennlp pads at the end), as for
    `elmo_lstm`; padding never changes a real position's output.

    # Parameters

    input_dim : `int`
        The width of the inputs (the character encoder's output) and of each direction's states.
    feedforward_hidden_dim : `int`
        The feed-forward width. Its old name `hidden_dim` is still read.
    num_layers : `int`, optional (default = `6`)
        Blocks per direction.
    num_attention_heads : `int`, optional (default = `8`)
        Attention heads; `input_dim` must be a multiple of it.
    dropout : `float`, optional (default = `0.1`)
        Dropout on each residual branch.
    input_dropout : `float`, optional (default = `None`)
        Dropout on the inputs before the positions are added; `None`: none.
    attention_dropout : `float`, optional (default = `0.0`)
        Dropout on the attention weights.
    backward_positions : `str`, optional (default = `"from_start"`)
        `"from_start"` numbers the backward stack's positions from the start of each sentence,
        as allennlp-models' transformer and the published transformer ELMo do: the backward
        stack knows where the sentence begins (never which tokens precede), which makes `<S>`
        and sentence-initial words easier to predict. `"from_end"` numbers them from the end,
        a strict right-to-left language model.
    input_layer_norm : `bool`, optional (default = `True`)
        A layer norm on the inputs, before the input dropout.
    return_all_layers : `bool`, optional (default = `False`)
        `forward` returns every layer instead of the top one.
    """

    renamed_keys = {"hidden_dim": "feedforward_hidden_dim"}
    _positions: torch.Tensor  # a buffer: the cached position encodings

    def __init__(
        self,
        input_dim: int,
        feedforward_hidden_dim: int,
        num_layers: int = 6,
        num_attention_heads: int = 8,
        dropout: float = 0.1,
        input_dropout: Optional[float] = None,
        attention_dropout: float = 0.0,
        backward_positions: str = "from_start",
        input_layer_norm: bool = True,
        return_all_layers: bool = False,
    ) -> None:
        super().__init__(input_dim, num_layers, return_all_layers)
        if backward_positions not in BACKWARD_POSITIONS:
            raise ConfigurationError(
                f"elmo_transformer: backward_positions must be one of {BACKWARD_POSITIONS}"
            )
        if num_layers < 1:
            raise ConfigurationError("elmo_transformer: num_layers must be at least 1")
        if input_dim % num_attention_heads != 0:
            raise ConfigurationError(
                f"elmo_transformer: input_dim {input_dim} is not a multiple of "
                f"num_attention_heads {num_attention_heads}"
            )
        self.feedforward_hidden_dim = feedforward_hidden_dim
        self.num_attention_heads = num_attention_heads
        self.backward_positions = backward_positions
        self.input_dropout = input_dropout or 0.0
        self.input_norm = torch.nn.LayerNorm(input_dim) if input_layer_norm else None
        self.layers = torch.nn.ModuleList(
            DirectionalBlock(
                input_dim,
                self.feedforward_hidden_dim,
                num_attention_heads,
                dropout,
                attention_dropout,
            )
            for _ in range(num_layers)
        )
        self.final_norm_weight = directional_parameter(1, input_dim, value=1.0)
        self.final_norm_bias = directional_parameter(1, input_dim, value=0.0)
        self.register_buffer("_positions", sinusoidal_positions(512, input_dim), persistent=False)

    def positions(self, timesteps: int) -> torch.Tensor:
        """(timesteps, input_dim) position encodings, extending the cached table if needed."""
        if timesteps > self._positions.size(0):
            table = sinusoidal_positions(2 * timesteps, self.input_dim)
            self._positions = table.to(device=self._positions.device, dtype=self._positions.dtype)
        return self._positions[:timesteps]

    def directional_inputs(self, inputs: torch.Tensor, reverse_index: torch.Tensor) -> torch.Tensor:
        """(batch, timesteps, dim) -> (2, batch, timesteps, dim): the inputs after input dropout
        (one mask for both directions), as read forward and as read backward (reversed within
        length), each plus its positions."""
        if self.input_norm is not None:
            inputs = self.input_norm(inputs)
        inputs = fast_dropout(inputs, self.input_dropout, self.training)
        positions = self.positions(inputs.size(1)).to(inputs.dtype)
        if self.backward_positions == "from_start":
            return both_directions(inputs + positions, reverse_index)
        return both_directions(inputs, reverse_index) + positions

    def run_layers(
        self, inputs: torch.Tensor, mask: torch.BoolTensor, every_layer: bool
    ) -> list[torch.Tensor]:
        """(batch, timesteps, input_dim) -> each layer's (batch, timesteps, 2 * input_dim)
        output, bottom first (only the top one unless `every_layer`); the top one after the
        final layer norm."""
        reverse_index = reverse_within_length(mask.sum(dim=1), mask.size(1))
        keep = mask.unsqueeze(-1).to(inputs.dtype)
        states = self.directional_inputs(inputs, reverse_index)
        layers = []
        for index, layer in enumerate(self.layers):
            states = layer(states)
            is_top = index == self.num_layers - 1
            if is_top:
                states = directional_layer_norm(
                    states, self.final_norm_weight, self.final_norm_bias
                )
            if every_layer or is_top:
                layers.append(join_directions(states, reverse_index, keep))
        return layers

    def all_layers(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> list[torch.Tensor]:
        """Every layer's (batch, timesteps, 2 * input_dim) output, bottom first."""
        return self.run_layers(inputs, mask, every_layer=True)

    def top_layer(self, inputs: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        """The top layer alone, without joining the directions of the layers below."""
        return self.run_layers(inputs, mask, every_layer=False)[0]
