"""allennlp's pretrained-transformer tokenizers on the `transformers` this project pins, set when
elmo_plugin is imported.

allennlp 2.10.1 loads each one (for every `pretrained_transformer*` tokenizer, indexer and
embedder) as `AutoTokenizer.from_pretrained(name, add_special_tokens=..., ...)`; `transformers`
4.44 and later refuse that keyword ("add_special_tokens conflicts with the method
add_special_tokens"), so none of them could be built. `get_tokenizer` takes the keyword out
before allennlp's own loader and cache see it: it configures nothing (`transformers` only stored
it; each call of the tokenizer takes its own `add_special_tokens`), so allennlp's tokenizers with
and without special tokens are one cached object. Listed in docs/security.md."""

from typing import Any

from allennlp.common import cached_transformers
from transformers import PreTrainedTokenizer

ALLENNLP_GET_TOKENIZER = cached_transformers.get_tokenizer


def get_tokenizer(model_name: str, **kwargs: Any) -> PreTrainedTokenizer:
    """allennlp's `cached_transformers.get_tokenizer` without `add_special_tokens`."""
    kwargs.pop("add_special_tokens", None)
    return ALLENNLP_GET_TOKENIZER(model_name, **kwargs)


cached_transformers.get_tokenizer = get_tokenizer
