"""What a biLM's users need of its character encoder, whatever its type: how a token's ids are
made, the ids of the sentence boundaries, the output width and the architecture that rebuilds it.

`ElmoCharCnn` and `ElmoManyLangsCnn` implement it; any other token embedder over ELMo's 50
character ids (allennlp-models' `character_encoding`, as their `language_model` configs index it
with `elmo_characters`) is read through `CharacterEncodingAdapter`.
"""

from abc import ABC, abstractmethod
from typing import Any, Optional

from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_manylangs_indexer import record_dictionary
from elmo_plugin.data.elmo_vocab_file import BOS, EOS


class CharacterEncoder(ABC):
    """
    A token's ids (`token_ids`) -> one vector of `get_output_dim()` values. A sentence is framed
    by the tokens `boundary_tokens`, whose ids are `boundary_ids()`. `architecture` is the
    encoder's registered `type` and constructor arguments, JSON-able: enough to rebuild it
    without weights. `indexer_dictionaries` is what its indexer reads from the vocabulary.
    """

    # The token texts that open and close every sentence (`<S>`, `</S>` for ELMo's ids).
    boundary_tokens: tuple[str, str] = (BOS, EOS)

    @abstractmethod
    def token_ids(self, text: str) -> list[int]:
        """One token's ids, as its indexer gives them (0 marks a padding token)."""

    def boundary_ids(self) -> tuple[list[int], list[int]]:
        """The ids of the two `boundary_tokens`."""
        bos, eos = self.boundary_tokens
        return self.token_ids(bos), self.token_ids(eos)

    @abstractmethod
    def get_output_dim(self) -> int:
        """The width of a token's vector."""

    @property
    @abstractmethod
    def architecture(self) -> dict[str, Any]:
        """`{"type": registered name, constructor arguments...}`."""

    def indexer_dictionaries(self, namespace: str) -> dict[str, dict[str, int]]:
        """Vocabulary namespace -> the dictionary (token -> id) the encoder's indexer reads there,
        for an indexer with namespace prefix `namespace`; none for ELMo's character ids."""
        return {}


class ElmoCharacterIds(CharacterEncoder):
    """ELMo's 50 character ids per token (allennlp's `ELMoCharacterMapper`, our `elmo_char_ids`
    indexer), framed by `<S>` and `</S>`."""

    _indexer: Optional[ElmoCharIdsIndexer] = None

    def token_ids(self, text: str) -> list[int]:
        if self._indexer is None:
            self._indexer = ElmoCharIdsIndexer()
        return self._indexer.char_ids(text)


class CharacterEncodingAdapter(ElmoCharacterIds):
    """A token embedder that is not a `CharacterEncoder` (allennlp-models' `character_encoding`)
    over ELMo's character ids. `architecture`: its params as its config gives them, known when
    it was built from them (`BiLmEncoder.from_architecture`)."""

    def __init__(self, embedder: TokenEmbedder, architecture: Optional[dict[str, Any]]) -> None:
        self.embedder = embedder
        self._architecture = architecture

    def get_output_dim(self) -> int:
        return self.embedder.get_output_dim()

    @property
    def architecture(self) -> dict[str, Any]:
        if self._architecture is None:
            raise ConfigurationError(
                f"the architecture of this {type(self.embedder).__name__} is unknown: it is "
                "known only when the encoder is built from its params"
            )
        return self._architecture


def character_encoder(
    embedder: TokenEmbedder, architecture: Optional[dict[str, Any]] = None
) -> CharacterEncoder:
    """The embedder itself where it is a `CharacterEncoder`, else read as ELMo's character ids
    (`architecture`: its params, where known)."""
    if isinstance(embedder, CharacterEncoder):
        return embedder
    return CharacterEncodingAdapter(embedder, architecture)


def record_indexer_dictionaries(
    vocab: Vocabulary, namespace: str, encoder: CharacterEncoder, source: str
) -> None:
    """The dictionaries the encoder's indexer reads (`indexer_dictionaries`) into the vocabulary,
    checked against any already recorded there (`source` names where they come from)."""
    for name, dictionary in encoder.indexer_dictionaries(namespace).items():
        record_dictionary(vocab, name, dictionary, source)
