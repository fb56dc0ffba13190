"""Pooling a sentence's token vectors into one vector, for `allennlp elmo-embed --pool` and the
`elmo_embeddings` predictor's `pool`: over the sentence's real tokens only, never padding or
`<S>`/`</S>`."""

import torch
from allennlp.common.checks import ConfigurationError

POOL_CHOICES = ("none", "mean", "max")


def check_pool(pool: str, who: str) -> str:
    """`pool` itself; a ConfigurationError naming `who` and the choices for any other value."""
    if pool not in POOL_CHOICES:
        raise ConfigurationError(f"{who}: pool must be one of {POOL_CHOICES}, got {pool!r}")
    return pool


def pool_tokens(vectors: torch.Tensor, pool: str) -> torch.Tensor:
    """
    vectors (..., tokens, dim) of one sentence's real tokens -> (..., dim): their mean or
    elementwise max (`none`: `vectors` unchanged). A sentence with no tokens pools to zeros
    for both `mean` and `max`.
    """
    if pool == "none":
        return vectors
    if vectors.size(-2) == 0:
        return vectors.new_zeros(*vectors.shape[:-2], vectors.size(-1))
    if pool == "mean":
        return vectors.mean(dim=-2)
    if pool == "max":
        return vectors.amax(dim=-2)
    raise ConfigurationError(f"pool must be one of {POOL_CHOICES}, got {pool!r}")
