"""TokenIndexer `elmo_char_ids`: ELMo character ids with a per-token cache."""
from typing import Dict, List

import torch
from allennlp.common.util import pad_sequence_to_length
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import Vocabulary

MAX_CHARS = ELMoCharacterMapper.max_word_length


@TokenIndexer.register("elmo_char_ids")
class ElmoCharIdsIndexer(TokenIndexer):
    """
    The ids of allennlp's `elmo_characters` (50 per token, 0 = padding), computed once per
    distinct token string. Output key `elmo_tokens`, so allennlp's ELMo embedders read it too.
    """

    def __init__(self, cache_size: int = 1_000_000, token_min_padding_length: int = 0) -> None:
        super().__init__(token_min_padding_length)
        self._mapper = ELMoCharacterMapper()
        self._cache: Dict[str, List[int]] = {}
        self._cache_size = cache_size

    def count_vocab_items(self, token: Token, counter: Dict[str, Dict[str, int]]) -> None:
        pass

    def char_ids(self, text: str) -> List[int]:
        """The 50 character ids of one token."""
        ids = self._cache.get(text)
        if ids is None:
            ids = self._mapper.convert_word_to_char_ids(text)
            if len(self._cache) < self._cache_size:
                self._cache[text] = ids
        return ids

    def tokens_to_indices(self, tokens: List[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        return {"elmo_tokens": [self.char_ids(token.ensure_text()) for token in tokens]}

    def get_empty_token_list(self) -> IndexedTokenList:
        return {"elmo_tokens": []}

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: Dict[str, int]
    ) -> Dict[str, torch.Tensor]:
        padded = pad_sequence_to_length(
            tokens["elmo_tokens"], padding_lengths["elmo_tokens"], lambda: [0] * MAX_CHARS
        )
        return {"elmo_tokens": torch.tensor(padded, dtype=torch.long)}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state
