"""`ElmoTextField`: a TextField that holds its tokens as strings, for fast pretraining data."""

from typing import Optional

from allennlp.data import Token, Vocabulary
from allennlp.data.fields import TextField
from allennlp.data.token_indexers import TokenIndexer


class ElmoTextField(TextField):
    """
    A `TextField` of plain-text tokens (`Token(text)` each), kept as a list of strings: a buffered
    instance then holds no `Token` objects, which cost time to make and, by the million,
    time in Python's garbage collector. `tokens` builds the `Token`s on access; indexing,
    padding and tensors are TextField's, with the same indexers and the same output.
    """

    __slots__ = ["texts"]

    def __init__(
        self, texts: list[str], token_indexers: Optional[dict[str, TokenIndexer]] = None
    ) -> None:
        # Not TextField.__init__: it stores and type-checks Token objects, made here on demand.
        self.texts = texts
        self._token_indexers = token_indexers
        self._indexed_tokens = None

    @property
    def tokens(self) -> list[Token]:  # type: ignore[override]  # read-only: made from `texts`
        return [Token(text) for text in self.texts]

    def index(self, vocab: Vocabulary) -> None:
        tokens = self.tokens  # made once for all indexers, dropped after
        self._indexed_tokens = {
            name: indexer.tokens_to_indices(tokens, vocab)
            for name, indexer in self.token_indexers.items()
        }

    def sequence_length(self) -> int:
        return len(self.texts)

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> Token:
        return Token(self.texts[index])

    # Pickled (to and from data-loader workers) as its strings: the default for slotted classes
    # would read and then try to set TextField's `tokens`, which is a read-only property here.
    def __getstate__(self) -> dict[str, object]:
        return {
            "texts": self.texts,
            "_token_indexers": self._token_indexers,
            "_indexed_tokens": self._indexed_tokens,
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
