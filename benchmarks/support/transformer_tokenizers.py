"""allennlp 2.10.1's pretrained-transformer tokenizer on the `transformers` this project pins.

allennlp loads every pretrained-transformer tokenizer (for `pretrained_transformer*` indexers
and embedders) as `AutoTokenizer.from_pretrained(name, add_special_tokens=False / True, ...)`.
`transformers` 4.44 and later refuse that keyword ("add_special_tokens conflicts with the method
add_special_tokens"): no such indexer or embedder can be built. `preload_tokenizer` puts the
tokenizer, loaded without that keyword (it configures nothing: allennlp passes it to each call),
in allennlp's tokenizer cache under the key allennlp asks for, so that every later indexer and
embedder of the same model in the process finds it there.

`pretrained_transformer_mismatched_preloaded`: allennlp's `pretrained_transformer_mismatched`
indexer, its tokenizer preloaded first. The dataset reader, and so the indexer, is built before
the model in `allennlp train`, `evaluate` and `predict`: the model's embedder, allennlp's own
`pretrained_transformer_mismatched`, then finds the tokenizer too.
"""

from typing import Any, Optional

from allennlp.common import cached_transformers
from allennlp.common.util import hash_object
from allennlp.data.token_indexers import PretrainedTransformerMismatchedIndexer, TokenIndexer
from transformers import AutoTokenizer


def preload_tokenizer(model_name: str, tokenizer_kwargs: Optional[dict[str, Any]] = None) -> None:
    """`model_name`'s tokenizer in allennlp's cache, under both keys
    `PretrainedTransformerTokenizer` looks it up by (`tokenizer_kwargs` as given to it; `use_fast`
    defaults to true there too)."""
    kwargs = dict(tokenizer_kwargs or {})
    kwargs.setdefault("use_fast", True)
    # it asks with either flag, and passes the flag to each call anyway
    keys = [(model_name, hash_object({"add_special_tokens": f, **kwargs})) for f in (False, True)]
    cache = cached_transformers._tokenizer_cache
    if any(key not in cache for key in keys):
        tokenizer = AutoTokenizer.from_pretrained(model_name, **kwargs)
        for key in keys:
            cache.setdefault(key, tokenizer)


@TokenIndexer.register("pretrained_transformer_mismatched_preloaded")
class PreloadedMismatchedIndexer(PretrainedTransformerMismatchedIndexer):
    """allennlp's `pretrained_transformer_mismatched` indexer (the same options), its
    tokenizer preloaded."""

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        preload_tokenizer(model_name, kwargs.get("tokenizer_kwargs"))
        super().__init__(model_name, **kwargs)
