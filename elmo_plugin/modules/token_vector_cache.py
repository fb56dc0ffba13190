"""A bounded cache of character-encoder outputs by token text, across batches (`elmo-embed`)."""

from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch
from allennlp.modules.token_embedders import TokenEmbedder


class TokenVectorCache:
    """
    Token texts -> the character encoder's vectors (n, char_dim), each distinct text encoded once
    while it stays among the `max_tokens` most recently used (least recently used ones are
    dropped, so memory is bounded). Valid because the character encoder maps each token on its
    own (ElmoCharCnn, allennlp's `character_encoding`); a frozen encoder is assumed.
    `char_ids` maps a text to its 50 character ids.
    """

    def __init__(
        self, char_cnn: TokenEmbedder, char_ids: Callable[[str], list[int]], max_tokens: int
    ) -> None:
        self.char_cnn, self.char_ids, self.max_tokens = char_cnn, char_ids, max_tokens
        self._vectors: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.hits = self.misses = 0

    def vectors(self, texts: Sequence[str]) -> torch.Tensor:
        """(n,) token texts -> (n, char_dim) vectors, on the encoder's device."""
        distinct = list(dict.fromkeys(texts))
        missing = [text for text in distinct if text not in self._vectors]
        self.hits, self.misses = (
            self.hits + len(distinct) - len(missing),
            self.misses + len(missing),
        )
        rows = {text: self._vectors[text] for text in distinct if text in self._vectors}
        for text in rows:
            self._vectors.move_to_end(text)
        if missing:
            device = next(self.char_cnn.parameters()).device
            ids = torch.tensor(
                [[self.char_ids(text) for text in missing]], dtype=torch.long, device=device
            )
            rows.update(zip(missing, self.char_cnn(ids)[0].unbind(0), strict=True))
            for text in missing:
                self._remember(text, rows[text])
        return torch.stack([rows[text] for text in texts])

    def _remember(self, text: str, vector: torch.Tensor) -> None:
        if self.max_tokens <= 0:
            return
        self._vectors[text] = vector.clone()  # not a view that would keep its whole batch alive
        if len(self._vectors) > self.max_tokens:
            self._vectors.popitem(last=False)
