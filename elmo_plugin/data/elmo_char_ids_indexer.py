"""TokenIndexer `elmo_char_ids`: ELMo character ids, computed in bulk and cached per token."""

import numpy as np
import torch
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary

MAX_CHARS = ELMoCharacterMapper.max_word_length
MAX_BYTES = MAX_CHARS - 2  # a word's UTF-8 bytes between begin- and end-of-word
# allennlp's ids are shifted by +1 so that 0 means a padding token
BEGIN_OF_WORD = ELMoCharacterMapper.beginning_of_word_character + 1
END_OF_WORD = ELMoCharacterMapper.end_of_word_character + 1
PADDING_CHAR = ELMoCharacterMapper.padding_character + 1
FIRST_TABLE_ROWS = 4096


def special_rows() -> dict[str, np.ndarray]:
    """`<S>` and `</S>`'s ids, which have no bytes: allennlp's mapper's own rows."""
    mapper = ELMoCharacterMapper()
    return {
        token: np.array(mapper.convert_word_to_char_ids(token), dtype=np.int16)
        for token in (ELMoCharacterMapper.bos_token, ELMoCharacterMapper.eos_token)
    }


SPECIAL_ROWS = special_rows()


def words_to_char_ids(words: list[str]) -> np.ndarray:
    """(len(words), 50) int16: allennlp's `ELMoCharacterMapper.convert_word_to_char_ids` of each
    word, in bulk (begin-of-word, the first 48 UTF-8 bytes + 1, end-of-word, padding chars)."""
    ids = np.full((len(words), MAX_CHARS), PADDING_CHAR, dtype=np.int16)
    ids[:, 0] = BEGIN_OF_WORD
    encoded = [word.encode("utf-8", "ignore")[:MAX_BYTES] for word in words]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(words))
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    # byte j of word i goes to column 1 + j of row i: rows by repeat, columns by offset from each
    # word's start
    rows = np.repeat(np.arange(len(words)), lengths)
    starts = np.cumsum(lengths) - lengths
    columns = np.arange(len(data)) - np.repeat(starts, lengths) + 1
    ids[rows, columns] = data.astype(np.int16) + 1
    ids[np.arange(len(words)), lengths + 1] = END_OF_WORD
    for row, word in enumerate(words):
        if word in SPECIAL_ROWS:
            ids[row] = SPECIAL_ROWS[word]
    return ids


@TokenIndexer.register("elmo_char_ids")
class ElmoCharIdsIndexer(TokenIndexer):
    """
    The ids of allennlp's `elmo_characters` (50 per token, 0 = padding), as one (tokens, 50)
    int16 array per text field: each distinct token string is computed once (in bulk, by
    `words_to_char_ids`) into a table of at most `cache_size` rows, later ones served from it;
    once the table is full, new strings are computed every time. Output key `elmo_tokens`, a
    LongTensor (tokens, 50), so allennlp's ELMo embedders read it too.

    # Parameters

    cache_size : `int`, optional (default = `1_000_000`)
        The most distinct token strings whose ids are kept.
    token_min_padding_length : `int`, optional (default = `0`)
        `TokenIndexer`'s: the fewest tokens a padded field has.
    """

    def __init__(self, cache_size: int = 1_000_000, token_min_padding_length: int = 0) -> None:
        super().__init__(token_min_padding_length)
        self._cache_size = cache_size
        self._clear_cache()

    def _clear_cache(self) -> None:
        self._rows: dict[str, int] = {}  # token string -> row of self._table
        self._table = np.zeros((0, MAX_CHARS), dtype=np.int16)

    def count_vocab_items(self, token: Token, counter: dict[str, dict[str, int]]) -> None:
        pass

    def _remember(self, words: list[str]) -> None:
        """Adds as many of `words` (new, distinct) to the table as `cache_size` allows; the table
        grows by doubling."""
        words = words[: max(self._cache_size - len(self._rows), 0)]
        if not words:
            return
        used = len(self._rows)
        if used + len(words) > len(self._table):
            capacity = min(
                max(2 * len(self._table), used + len(words), FIRST_TABLE_ROWS), self._cache_size
            )
            grown = np.zeros((capacity, MAX_CHARS), dtype=np.int16)
            grown[:used] = self._table[:used]
            self._table = grown
        self._table[used : used + len(words)] = words_to_char_ids(words)
        self._rows.update(zip(words, range(used, used + len(words)), strict=True))

    def char_ids(self, text: str) -> list[int]:
        """The 50 character ids of one token string."""
        return self.char_ids_of([text])[0].tolist()

    def char_ids_of(self, texts: list[str]) -> np.ndarray:
        """(len(texts), 50) int16 character ids of these token strings."""
        rows = self._rows
        self._remember([text for text in dict.fromkeys(texts) if text not in rows])
        found = [rows.get(text, -1) for text in texts]
        if -1 not in found:
            return self._table[found]
        # the table is full: strings not in it are computed here
        ids = words_to_char_ids(texts)
        cached = [position for position, row in enumerate(found) if row >= 0]
        ids[cached] = self._table[[found[position] for position in cached]]
        return ids

    def tokens_to_indices(self, tokens: list[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        ids = self.char_ids_of([token.ensure_text() for token in tokens])
        # one (tokens, 50) array instead of a list of lists: as_padded_tensor_dict reads both
        return {"elmo_tokens": ids}  # type: ignore[dict-item]

    def get_empty_token_list(self) -> IndexedTokenList:
        return {"elmo_tokens": []}

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: dict[str, int]
    ) -> dict[str, torch.Tensor]:
        """{"elmo_tokens": LongTensor (padding length, 50)}, cut or padded with all-zero rows."""
        ids = np.asarray(tokens["elmo_tokens"], dtype=np.int16).reshape(-1, MAX_CHARS)
        length = padding_lengths["elmo_tokens"]
        padded = np.zeros((length, MAX_CHARS), dtype=np.int64)
        padded[: min(length, len(ids))] = ids[:length]
        return {"elmo_tokens": torch.from_numpy(padded)}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_rows"], state["_table"] = {}, np.zeros((0, MAX_CHARS), dtype=np.int16)
        return state
