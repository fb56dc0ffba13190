"""TokenEmbedder `elmo_manylangs_cnn`: the "cnn" token embedder of ELMoForManyLangs
(HIT-SCIR)."""

from typing import Any, Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.highway import Highway
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.data.elmo_manylangs_indexer import (
    BOS,
    DEFAULT_NAMESPACE,
    EOS,
    PAD,
    boundary_ids,
    chars_namespace,
    recorded_dictionary,
    token_ids,
    vocabulary_dictionaries,
    words_namespace,
)
from elmo_plugin.modules.character_encoder import CharacterEncoder
from elmo_plugin.modules.elmo_char_cnn import ACTIVATIONS

Dictionaries = tuple[dict[str, int], Optional[dict[str, int]]]  # (chars, words or None)


@TokenEmbedder.register("elmo_manylangs_cnn")
class ElmoManyLangsCnn(TokenEmbedder, CharacterEncoder):
    """
    Ids (batch, tokens, 1 + max_chars) from `elmo_manylangs_ids` (column 0 the word id, then the
    character ids, all + 1; 0 = padding token) -> token vectors (batch, tokens, projection_dim).
    A `CharacterEncoder`: sentences are framed by `<bos>` and `<eos>`.

    char embedding -> one Conv1d per `[width, count]` filter, max over all max_chars positions
    (padding characters included, as ELMoForManyLangs computes it), activation -> `num_highway`
    highway layers (relu, whatever `activation` says, as its code does) -> [word embedding
    (`word_dim` > 0); that] -> linear projection. Padding tokens give zero vectors.

    `num_characters`, `num_words`, `sentence_boundaries` and the padding ids may be left out
    where the model's vocabulary holds its dictionaries (namespace `namespace`, as the
    `elmo_manylangs` vocabulary records them for continued pretraining): they are then derived
    from them. Where the vocabulary holds them, `token_ids` gives a token's ids; `architecture`
    holds every argument, explicit.

    # Parameters

    char_dim : `int`
        The width of a character's embedding (its config's `token_embedder.char_dim`).
    filters : `List[Tuple[int, int]]`
        One `[width, count]` per convolution (`token_embedder.filters`).
    num_highway : `int`
        Highway layers after the convolutions (`token_embedder.n_highway`).
    projection_dim : `int`
        The output width (`encoder.projection_dim`).
    word_dim : `int`, optional (default = `0`)
        The width of a word's embedding, concatenated before the projection; 0: none.
    activation : `str`, optional (default = `"relu"`)
        Applied to the pooled convolutions: `"relu"` or `"tanh"`.
    max_characters_per_token : `int`, optional (default = `50`)
        Characters per token; the indexer must give the same.
    num_characters : `int`, optional (default = `None`)
        Rows of the character embedding; `None`: the size of the vocabulary's dictionary.
    num_words : `int`, optional (default = `0`)
        Rows of the word embedding (with `word_dim` > 0); derived with `num_characters`.
    sentence_boundaries : `Dict[str, List[int]]`, optional (default = `None`)
        The indexed `<bos>` and `<eos>` tokens, which `elmo_bilm_embedder` puts around every
        sentence; `None`: derived from the vocabulary's dictionaries.
    char_padding_id : `int`, optional (default = `None`)
        The `<pad>` character id, whose embedding gets no gradient (as in its `EmbeddingLayer`).
    word_padding_id : `int`, optional (default = `None`)
        The `<pad>` word id, likewise.
    vocab : `Vocabulary`, optional (default = `None`)
        Given by allennlp: the model's vocabulary; its dictionaries, where it holds them, give
        the sizes above that are left out (and must have those that are given).
    namespace : `str`, optional (default = `"elmo_manylangs"`)
        The prefix of the vocabulary namespaces that hold the dictionaries.
    """

    boundary_tokens = (BOS, EOS)

    def __init__(
        self,
        char_dim: int,
        filters: list[tuple[int, int]],
        num_highway: int,
        projection_dim: int,
        word_dim: int = 0,
        activation: str = "relu",
        max_characters_per_token: int = 50,
        num_characters: Optional[int] = None,
        num_words: int = 0,
        sentence_boundaries: Optional[dict[str, list[int]]] = None,
        char_padding_id: Optional[int] = None,
        word_padding_id: Optional[int] = None,
        vocab: Optional[Vocabulary] = None,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigurationError(
                f"elmo_manylangs_cnn: activation must be one of {list(ACTIVATIONS)}"
            )
        self._dictionaries: Optional[Dictionaries] = None
        if vocab is not None and recorded_dictionary(vocab, chars_namespace(namespace)):
            self._dictionaries = vocabulary_dictionaries(vocab, namespace, word_dim > 0)
        if num_characters is None or sentence_boundaries is None:
            if vocab is None:
                raise ConfigurationError(
                    "elmo_manylangs_cnn: give num_characters and sentence_boundaries, or a "
                    "vocabulary with the model's dictionaries (vocabulary type elmo_manylangs)"
                )
            chars, words = self._dictionaries or vocabulary_dictionaries(
                vocab, namespace, word_dim > 0
            )
            num_characters, num_words = len(chars), len(words) if words else 0
            sentence_boundaries = boundary_ids(chars, words, max_characters_per_token)
            char_padding_id, word_padding_id = chars[PAD], words[PAD] if words else None
        elif self._dictionaries and len(self._dictionaries[0]) != num_characters:
            raise ConfigurationError(
                f"elmo_manylangs_cnn: num_characters is {num_characters}, but the vocabulary's "
                f"character dictionary (namespace {chars_namespace(namespace)!r}) has "
                f"{len(self._dictionaries[0])} entries"
            )
        self._architecture: dict[str, Any] = {
            "type": "elmo_manylangs_cnn",
            "char_dim": char_dim,
            "filters": [list(f) for f in filters],
            "num_highway": num_highway,
            "projection_dim": projection_dim,
            "word_dim": word_dim,
            "activation": activation,
            "max_characters_per_token": max_characters_per_token,
            "num_characters": num_characters,
            "num_words": num_words,
            "sentence_boundaries": sentence_boundaries,
            "char_padding_id": char_padding_id,
            "word_padding_id": word_padding_id,
        }
        self.filters = [(int(width), int(count)) for width, count in filters]
        # As its `EmbeddingLayer`s: the `<pad>` rows get no gradient (they are used, not zero).
        self.char_embedding = torch.nn.Embedding(
            num_characters, char_dim, padding_idx=char_padding_id
        )
        self.word_embedding = (
            torch.nn.Embedding(num_words, word_dim, padding_idx=word_padding_id)
            if word_dim > 0
            else None
        )
        self.convolutions = torch.nn.ModuleList(
            torch.nn.Conv1d(char_dim, count, kernel_size=width) for width, count in self.filters
        )
        num_filters = sum(count for _, count in self.filters)
        self.highways = Highway(num_filters, num_highway, activation=torch.nn.functional.relu)
        self.projection = torch.nn.Linear(num_filters + word_dim, projection_dim)
        self._activation = ACTIVATIONS[activation]
        self._boundaries = {name: list(ids) for name, ids in sentence_boundaries.items()}
        self._output_dim = projection_dim

    def token_ids(self, text: str) -> list[int]:
        if self._dictionaries is None:
            raise ConfigurationError(
                "elmo_manylangs_cnn: built without its dictionaries (from its architecture "
                "alone), so it cannot index a token: its elmo_manylangs_ids indexer reads them "
                "from the vocabulary that records them"
            )
        chars, words = self._dictionaries
        return token_ids(text, chars, words, self._architecture["max_characters_per_token"])

    def boundary_ids(self) -> tuple[list[int], list[int]]:
        return self._boundaries[BOS], self._boundaries[EOS]

    def get_output_dim(self) -> int:
        return self._output_dim

    @property
    def architecture(self) -> dict[str, Any]:
        return self._architecture

    def indexer_dictionaries(self, namespace: str) -> dict[str, dict[str, int]]:
        if self._dictionaries is None:
            return {}
        chars, words = self._dictionaries
        recorded = {chars_namespace(namespace): chars}
        if words is not None:
            recorded[words_namespace(namespace)] = words
        return recorded

    def forward(self, elmo_tokens: torch.Tensor) -> torch.Tensor:
        """(..., 1 + max_chars) ids -> (..., projection_dim)."""
        max_chars = self._architecture["max_characters_per_token"]
        if elmo_tokens.size(-1) != 1 + max_chars:  # a different window changes every max-pool
            raise ConfigurationError(
                f"elmo_manylangs_cnn: got {elmo_tokens.size(-1) - 1} characters per token, the "
                f"model has max_characters_per_token {max_chars}: give its elmo_manylangs_ids "
                "indexer the same"
            )
        ids = (elmo_tokens - 1).clamp(min=0)  # padding tokens: any valid id, zeroed below
        characters = self.char_embedding(ids[..., 1:].reshape(-1, ids.size(-1) - 1)).transpose(1, 2)
        pooled = [
            self._activation(conv(characters).max(dim=-1).values) for conv in self.convolutions
        ]
        vectors = self.highways(torch.cat(pooled, dim=-1)).view(*ids.shape[:-1], -1)
        if self.word_embedding is not None:
            vectors = torch.cat([self.word_embedding(ids[..., 0]), vectors], dim=-1)
        mask = (elmo_tokens > 0).any(dim=-1, keepdim=True)
        return self.projection(vectors) * mask
