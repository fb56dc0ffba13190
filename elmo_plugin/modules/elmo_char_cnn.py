"""TokenEmbedder `elmo_char_cnn`: ELMo's character CNN input layer, built without a weight file."""
from typing import List, Tuple

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.highway import Highway
from allennlp.modules.token_embedders import TokenEmbedder

ACTIVATIONS = {"relu": torch.nn.functional.relu, "tanh": torch.tanh}


@TokenEmbedder.register("elmo_char_cnn")
class ElmoCharCnn(TokenEmbedder):
    """
    Character ids (batch, tokens, 50) -> token vectors (batch, tokens, projection_dim).

    char embedding -> one Conv1d per `[width, count]` filter, max over positions, activation ->
    `num_highway` highway layers (relu) -> linear projection. Parameters map one-to-one onto the
    `char_cnn` part of ELMo's `options.json` / `weights.hdf5`. Each distinct token in a batch
    is encoded once. Padding tokens (all ids 0) give zero vectors.
    """

    def __init__(
        self,
        filters: List[Tuple[int, int]],
        num_highway: int,
        projection_dim: int,
        embedding_dim: int = 16,
        activation: str = "relu",
        num_characters: int = 262,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigurationError(f"elmo_char_cnn: activation must be one of {list(ACTIVATIONS)}")
        self.filters = [(int(width), int(count)) for width, count in filters]
        self.activation = activation
        self.char_embedding = torch.nn.Embedding(num_characters, embedding_dim, padding_idx=0)
        self.convolutions = torch.nn.ModuleList(
            torch.nn.Conv1d(embedding_dim, count, kernel_size=width) for width, count in self.filters
        )
        num_filters = sum(count for _, count in self.filters)
        self.highways = Highway(num_filters, num_highway, activation=torch.nn.functional.relu)
        self.projection = torch.nn.Linear(num_filters, projection_dim)
        self._activation = ACTIVATIONS[activation]
        self._output_dim = projection_dim

    def get_output_dim(self) -> int:
        return self._output_dim

    def encode_distinct(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(words, 50) ids -> (words, projection_dim), no de-duplication."""
        embedded = self.char_embedding(char_ids).transpose(1, 2)  # (words, dim, 50)
        pooled = [self._activation(conv(embedded).max(dim=-1)[0]) for conv in self.convolutions]
        return self.projection(self.highways(torch.cat(pooled, dim=-1)))

    def forward(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        batch_shape = elmo_tokens.shape[:-1]
        flat = elmo_tokens.reshape(-1, elmo_tokens.size(-1))
        distinct, inverse = torch.unique(flat, dim=0, return_inverse=True)
        vectors = self.encode_distinct(distinct)[inverse]
        is_token = (flat > 0).any(dim=-1, keepdim=True)
        return (vectors * is_token).view(*batch_shape, -1)
