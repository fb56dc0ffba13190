"""TokenEmbedder `elmo_char_cnn`: ELMo's character CNN input layer, built without a weight
file."""

from collections.abc import Callable
from typing import Any, Optional, cast

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.modules.highway import Highway
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.cpu.distinct_rows import distinct_rows
from elmo_plugin.cpu.onednn_matmul import RightMatrix, linear, uses_onednn
from elmo_plugin.modules.character_encoder import ElmoCharacterIds
from elmo_plugin.modules.device_paths import takes_cpu_path

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.nn.functional.relu,
    "tanh": torch.tanh,
}
PADDING_CHAR_ID = ELMoCharacterMapper.padding_character + 1
# Upper bounds of token lengths (characters up to the last non-padding one) encoded together.
LENGTH_GROUPS = (5, 7, 9, 12, 16, 24, 50)


def token_lengths(char_ids: torch.Tensor) -> torch.Tensor:
    """(n, chars) ids -> (n,) position after the last non-padding character, at least 1;
    0 for padding tokens (all ids 0). Every character from there on is the padding character."""
    positions = torch.arange(1, char_ids.size(-1) + 1, device=char_ids.device)
    last = (positions * (char_ids != PADDING_CHAR_ID)).amax(dim=-1).clamp(min=1)
    return last * (char_ids > 0).any(dim=-1)


def windows_times_filters(
    characters: torch.Tensor, width: int, filters: RightMatrix, bias: torch.Tensor
) -> torch.Tensor:
    """(n, positions + width - 1, char_dim) embedded characters, every filter as a (char_dim *
    width, filters) `RightMatrix` (`ElmoCharCnn.filters_as_one_matrix`) and their bias (filters,)
    -> (n, positions, filters). All convolutions as one oneDNN matmul of every window of `width`
    characters (im2col) with the filters: one call instead of one convolution per width (oneDNN
    sets up a kernel per shape), narrower filters padded with zero taps. The same numbers within
    float32 rounding. No gradient."""
    # (n, positions, char_dim, width): the order of a Conv1d weight's last two dimensions
    windows = characters.unfold(1, width, 1)
    return filters(windows.flatten(2), bias)


@TokenEmbedder.register("elmo_char_cnn")
class ElmoCharCnn(TokenEmbedder, ElmoCharacterIds):
    """
    Character ids (batch, tokens, 50) -> token vectors (batch, tokens, projection_dim).
    A `CharacterEncoder` over ELMo's character ids (`elmo_char_ids`), framed by `<S>` and `</S>`.

    char embedding -> one Conv1d per `[width, count]` filter, max over positions, activation ->
    `num_highway` highway layers (relu) -> linear projection. Parameters map one-to-one onto the
    `char_cnn` part of ELMo's `options.json` / `weights.hdf5`. Padding tokens (all ids 0) give
    zero vectors.

    `reference` computes it over fixed shapes (every token, every character position, all filters
    in one matmul), with no host reads: it runs wherever the CPU's paths do not
    (`takes_cpu_path`). On the CPU `cpu_fast_path` gives the same numbers with less work: each
    distinct token of the batch is encoded once, tokens are grouped by length, and each
    convolution runs only over the character prefix that can matter. A token of length L is
    followed by padding characters, so every window starting at or after L sees only padding and
    has one value per filter, computed once per batch: the max over positions is the max over
    the first L windows and, where the token leaves room for one, that all-padding window.

    # Parameters

    filters : `List[Tuple[int, int]]`
        One `[width, count]` per convolution: `count` filters over `width` characters
        (options.json `char_cnn.filters`).
    num_highway : `int`
        Highway layers after the convolutions (options.json `char_cnn.n_highway`).
    projection_dim : `int`
        The output width (options.json `lstm.projection_dim`).
    embedding_dim : `int`, optional (default = `16`)
        The width of a character's embedding (options.json `char_cnn.embedding.dim`).
    activation : `str`, optional (default = `"relu"`)
        Applied to the pooled convolutions: `"relu"` or `"tanh"` (options.json
        `char_cnn.activation`).
    num_characters : `int`, optional (default = `262`)
        Rows of the character embedding: ELMo's 261 character ids + 1 (id 0 is padding).
    """

    _widths: torch.Tensor  # buffer (total filters,): each filter's width

    def __init__(
        self,
        filters: list[tuple[int, int]],
        num_highway: int,
        projection_dim: int,
        embedding_dim: int = 16,
        activation: str = "relu",
        num_characters: int = 262,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigurationError(
                f"elmo_char_cnn: activation must be one of {list(ACTIVATIONS)}"
            )
        self.filters = [(int(width), int(count)) for width, count in filters]
        self.activation = activation
        self._architecture: dict[str, Any] = {
            "type": "elmo_char_cnn",
            "filters": [[width, count] for width, count in self.filters],
            "num_highway": num_highway,
            "projection_dim": projection_dim,
            "embedding_dim": embedding_dim,
            "activation": activation,
            "num_characters": num_characters,
        }
        self.char_embedding = torch.nn.Embedding(num_characters, embedding_dim, padding_idx=0)
        self.convolutions = torch.nn.ModuleList(
            torch.nn.Conv1d(embedding_dim, count, kernel_size=width)
            for width, count in self.filters
        )
        num_filters = sum(count for _, count in self.filters)
        self.highways = Highway(num_filters, num_highway, activation=torch.nn.functional.relu)
        self.projection = torch.nn.Linear(num_filters, projection_dim)
        self._activation = ACTIVATIONS[activation]
        self._widest = max(width for width, _ in self.filters)
        widths = [width for width, count in self.filters for _ in range(count)]
        self.register_buffer("_widths", torch.tensor(widths), persistent=False)
        self._output_dim = projection_dim
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """bilm-tf's initialization: characters uniform(-1, 1) (padding character 0 zero), relu
        convolutions uniform(-0.05, 0.05) (tanh ones normal with std sqrt(1 / (width *
        embedding_dim))). Highway and projection matrices normal with std sqrt(1 / in), zero
        biases except the highway gates' +2 (carry the input at first: bilm-tf's carry bias -2,
        sign-flipped for allennlp's `Highway`)."""
        torch.nn.init.uniform_(self.char_embedding.weight, -1.0, 1.0)
        with torch.no_grad():
            self.char_embedding.weight[0].zero_()
        for (width, _), convolution in zip(self.filters, self.conv_layers(), strict=True):
            if self.activation == "relu":
                torch.nn.init.uniform_(convolution.weight, -0.05, 0.05)
            else:
                torch.nn.init.normal_(
                    convolution.weight, std=(1.0 / (width * convolution.in_channels)) ** 0.5
                )
            torch.nn.init.zeros_(convolution.get_parameter("bias"))
        for layer in [*self.highway_layers(), self.projection]:
            torch.nn.init.normal_(layer.weight, std=(1.0 / layer.in_features) ** 0.5)
            torch.nn.init.zeros_(layer.bias)
        for layer in self.highway_layers():
            torch.nn.init.constant_(layer.bias[layer.in_features :], 2.0)

    def get_output_dim(self) -> int:
        return self._output_dim

    @property
    def architecture(self) -> dict[str, Any]:
        return self._architecture

    def conv_layers(self) -> list[torch.nn.Conv1d]:
        """The convolutions, one per `filters` entry, in order."""
        return [cast(torch.nn.Conv1d, conv) for conv in self.convolutions]

    def highway_layers(self) -> list[torch.nn.Linear]:
        """Each highway layer's Linear (nonlinear part and gate stacked: 2 x width outputs)."""
        return [cast(torch.nn.Linear, layer) for layer in self.highways._layers]

    def padding_windows(self) -> torch.Tensor:
        """(total filters,) every filter's convolution of a window of padding characters only."""
        padding = self.char_embedding.weight[PADDING_CHAR_ID].view(1, -1, 1)
        windows = [padding.expand(-1, -1, width) for width, _ in self.filters]
        return torch.cat(
            [
                conv(window)[0, :, 0]
                for conv, window in zip(self.conv_layers(), windows, strict=True)
            ]
        )

    def stacked_filters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every filter as a row of one (total filters, char_dim * widest) matrix, in a Conv1d
        weight's (char_dim, width) order, narrower filters padded with zero taps; their biases
        (total filters,)."""
        pad = torch.nn.functional.pad
        weight = torch.cat(
            [
                pad(conv.weight, (0, self._widest - conv.weight.size(-1)))
                for conv in self.conv_layers()
            ]
        )
        return weight.flatten(1), torch.cat(
            [conv.get_parameter("bias") for conv in self.conv_layers()]
        )

    def filters_as_one_matrix(self) -> Optional[tuple[RightMatrix, torch.Tensor]]:
        """`stacked_filters` as a (char_dim * widest, total filters) matrix prepacked for oneDNN
        once for all of a batch's length groups (a plain weight is reordered inside every
        call), and the biases; None where oneDNN is not used (gradients, other dtypes and
        devices)."""
        if not uses_onednn(self.char_embedding.weight, *self.convolutions.parameters()):
            return None
        weight, bias = self.stacked_filters()
        return RightMatrix(weight.t()), bias

    def pooled_convolutions(
        self,
        char_ids: torch.Tensor,
        lengths: torch.Tensor,
        padding_windows: torch.Tensor,
        filters: Optional[tuple[RightMatrix, torch.Tensor]],
    ) -> torch.Tensor:
        """(n, chars) ids of real tokens, (n,) their lengths, `padding_windows`,
        `filters_as_one_matrix` -> (n, total filters): every filter's max over positions,
        activated."""
        num_chars, longest = char_ids.size(-1), int(lengths.max())
        widths = self._widths
        if filters is not None:
            best = self.best_windows_in_one_matmul(char_ids, longest, widths, filters)
        else:
            characters = self.char_embedding(
                char_ids[:, : longest + self._widest - 1]
            )  # (n, chars, char_dim)
            # amax, not max: no argmax indices to compute; tied windows share the gradient
            best = torch.cat(
                [
                    conv(characters[:, : longest + width - 1].transpose(1, 2)).amax(dim=-1)
                    for (width, _), conv in zip(self.filters, self.conv_layers(), strict=True)
                ],
                dim=-1,
            )
        has_padding_window = lengths.unsqueeze(1) <= num_chars - widths  # (n, total filters)
        return self._activation(
            torch.where(has_padding_window, torch.maximum(best, padding_windows), best)
        )

    def best_windows_in_one_matmul(
        self,
        char_ids: torch.Tensor,
        longest: int,
        widths: torch.Tensor,
        filters: tuple[RightMatrix, torch.Tensor],
    ) -> torch.Tensor:
        """(n, chars) ids of tokens no longer than `longest`, `filters_as_one_matrix` -> (n, total
        filters): each filter's max over the windows starting at positions 0 .. longest - 1
        (those that exist: a window of width w ends by the last character), through
        `windows_times_filters` with the widest window at every position. No gradient."""
        num_chars, reach = char_ids.size(-1), longest + self._widest - 1
        if reach > num_chars:  # windows past the last character: read padding, masked out below
            char_ids = torch.nn.functional.pad(
                char_ids, (0, reach - num_chars), value=PADDING_CHAR_ID
            )
        characters = self.char_embedding(char_ids[:, :reach])
        products = windows_times_filters(
            characters, self._widest, *filters
        )  # (n, longest, filters)
        if reach > num_chars:
            exists = (
                torch.arange(longest, device=widths.device).unsqueeze(1) + widths <= num_chars
            )  # (longest, filters)
            products = products.masked_fill(~exists, float("-inf"))
        return products.amax(dim=1)

    def encode_distinct(self, char_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(n, chars) ids of real tokens sorted by length, (n,) lengths -> (n, projection_dim),
        one group of similar lengths at a time."""
        bounds = torch.searchsorted(
            lengths, torch.tensor(LENGTH_GROUPS, device=lengths.device), right=True
        )
        padding_windows, filters = self.padding_windows(), self.filters_as_one_matrix()
        pooled, start = [self.projection.weight.new_zeros(0, self.projection.in_features)], 0
        for end in bounds.tolist():
            if end > start:
                group = char_ids[start:end], lengths[start:end]
                pooled.append(self.pooled_convolutions(*group, padding_windows, filters))
            start = end
        return self.highway_projection(torch.cat(pooled))

    def highway_projection(self, pooled: torch.Tensor) -> torch.Tensor:
        """(n, total filters) -> (n, projection_dim): the highway layers, then the projection.
        Where no gradient is needed on a float32 CPU (inference, or a frozen ELMo), the same
        computation as allennlp's `Highway` runs its matmuls through oneDNN (`onednn_matmul`)."""
        layers = [*self.highway_layers(), self.projection]
        if not uses_onednn(
            pooled, *(parameter for layer in layers for parameter in layer.parameters())
        ):
            return self.projection(self.highways(pooled))
        for layer in self.highway_layers():
            nonlinear, gate = linear(pooled, layer.weight, layer.bias).chunk(2, dim=-1)
            # gate * pooled + (1 - gate) * activation(nonlinear) in one pass:
            # lerp(a, b, w) = a + w (b - a)
            pooled = torch.lerp(self.highways._activation(nonlinear), pooled, gate.sigmoid_())
        return linear(pooled, self.projection.weight, self.projection.bias)

    def reference(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        """(..., chars) ids -> (..., projection_dim) over fixed shapes: every token and every
        character position, all filters in one matmul over windows of the widest width, the
        windows that run past the last character masked. No host reads: the same ops on the
        same shapes for every batch of one shape."""
        ids = elmo_tokens.reshape(-1, elmo_tokens.size(-1))  # (n, chars)
        num_chars = ids.size(-1)
        # (n, chars + widest - 1, char_dim): zero vectors past the end, read only by zero taps
        # or by windows masked below
        characters = torch.nn.functional.pad(self.char_embedding(ids), (0, 0, 0, self._widest - 1))
        windows = characters.unfold(1, self._widest, 1).flatten(2)  # (n, chars, char_dim * widest)
        weight, bias = self.stacked_filters()
        # (chars, F): a filter of width w has a window at position p where p + w <= chars;
        # its bias there, -inf where the window would run past the last character
        positions = torch.arange(num_chars, device=ids.device).unsqueeze(1)
        bias = torch.where(positions + self._widths <= num_chars, bias, float("-inf"))
        products = torch.matmul(windows, weight.t()).add_(bias)  # (n, chars, F)
        # max, not amax: its backward keeps (n, F) indices, not an (n, chars, F) mask (a third
        # of the memory). It gives a tie's gradient to one window; the tied all-padding windows
        # past a token's end have one input, so no parameter's gradient changes.
        best = products.max(dim=1).values  # (n, F)
        vectors = self.projection(self.highways(self._activation(best)))
        is_token = (ids > 0).any(dim=-1, keepdim=True)
        return torch.where(is_token, vectors, 0).view(*elmo_tokens.shape[:-1], self._output_dim)

    def forward(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        """(..., chars) ids -> (..., projection_dim): `cpu_fast_path` where the CPU's paths run
        (`takes_cpu_path`), `reference` everywhere else."""
        if takes_cpu_path(elmo_tokens.device):
            return self.cpu_fast_path(elmo_tokens)
        return self.reference(elmo_tokens)

    def cpu_fast_path(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        """(..., chars) ids -> (..., projection_dim): distinct tokens, by length groups."""
        distinct, inverse = distinct_rows(elmo_tokens.reshape(-1, elmo_tokens.size(-1)))
        lengths = token_lengths(distinct)
        order = torch.argsort(lengths)  # the padding token (length 0), if any, comes first
        num_padding = int((lengths == 0).sum())  # 0 or 1
        vectors = self.encode_distinct(distinct[order[num_padding:]], lengths[order[num_padding:]])
        table = torch.cat([vectors.new_zeros(1, vectors.size(-1)), vectors])  # row 0: padding
        rows = torch.argsort(order) + 1 - num_padding  # distinct token -> its row of table
        return table[rows[inverse]].view(*elmo_tokens.shape[:-1], self._output_dim)
