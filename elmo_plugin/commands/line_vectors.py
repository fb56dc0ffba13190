"""What `elmo-embed` stores of a batch, made where the batch was computed (on the GPU there): the
sentence boundaries removed, the layers selected (`--layers`), the tokens pooled (`--pool`) and
the values cast (`--dtype`), over the batch's padded shape with no host reads."""

from typing import NamedTuple, Optional

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16}


class VectorForm(NamedTuple):
    """`layers`: all, average, top or mix (`mix_weights` (num_layers,) softmax(s) on the
    encoder's device, times `mix_gamma`); `pool`: none, mean or max; `dtype`: float32 or
    float16."""

    layers: str = "all"
    pool: str = "none"
    dtype: str = "float32"
    mix_weights: Optional[torch.Tensor] = None
    mix_gamma: float = 1.0


def line_vectors(layers: list[torch.Tensor], mask: torch.Tensor, form: VectorForm) -> torch.Tensor:
    """Every layer (rows, width, dim) of sentences `<S> w1 .. wn </S>`, mask (rows, width) ->
    (rows, [num_layers,] width - 2, dim) with `layers` all, (rows, width - 2, dim) otherwise,
    zero past each sentence's n tokens; with a `pool`, the tokens axis pooled away (a row with no
    tokens: zeros for mean, -inf for max). In float32 whatever the layers' dtype, then cast to
    `form.dtype`."""
    stacked = torch.stack(layers, dim=1).float()[:, :, 1:-1]  # (rows, layers, width - 2, dim)
    positions = torch.arange(stacked.size(2), device=mask.device)
    keep = positions < (mask.sum(dim=1, keepdim=True) - 2)  # (rows, width - 2)
    inner = torch.where(keep[:, None, :, None], stacked, 0.0)
    if form.layers == "average":
        selected = inner.mean(dim=1)
    elif form.layers == "top":
        selected = inner[:, -1]
    elif form.mix_weights is not None:
        selected = form.mix_gamma * torch.einsum("l,rltd->rtd", form.mix_weights, inner)
    else:
        selected = inner
    kept = keep.view(keep.size(0), *[1] * (selected.dim() - 3), keep.size(1), 1)
    if form.pool == "mean":
        count = kept.sum(dim=-2).clamp(min=1)
        selected = selected.sum(dim=-2) / count
    elif form.pool == "max":
        selected = torch.where(kept, selected, float("-inf")).amax(dim=-2)
    return selected.to(DTYPES[form.dtype])
