"""allennlp's full `SoftmaxLoss` at fixed shapes: every position of a batch, weighted."""

from collections.abc import Callable
from typing import Any, Optional, TypeVar

import torch
from allennlp.modules.softmax_loss import SoftmaxLoss

Loss = TypeVar("Loss", bound=torch.nn.Module)


def rebuilt(
    cls: type[Loss], parameters: dict[str, torch.Tensor], *args: Any, **kwargs: Any
) -> Loss:
    """`cls(*args, **kwargs)` holding `parameters` (a state dict with `keep_vars=True`: the same
    tensors, not copies). Built on the meta device, so no second softmax of num_words x
    embedding_dim is drawn or allocated, and the random number generators are left as they
    were."""
    with torch.device("meta"):
        loss = cls(*args, **kwargs)
    loss.load_state_dict(parameters, assign=True)
    return loss


def per_group(
    loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    embeddings: torch.Tensor,
    targets: torch.Tensor,
    weights: Optional[torch.Tensor],
) -> torch.Tensor:
    """embeddings (groups..., n, P), targets (groups..., n), weights (groups..., n; None: all
    1) -> `loss`(embeddings (G, n, P), targets (G, n) int64, weights (G, n)) (G,) as
    (groups...)."""
    groups = targets.shape[:-1]
    embeddings = embeddings.reshape(-1, *embeddings.shape[-2:])
    targets = targets.reshape(-1, targets.size(-1)).long()
    weights = torch.ones_like(targets) if weights is None else weights.reshape(targets.shape)
    return loss(embeddings, targets, weights).reshape(groups)


class WeightedSoftmaxLoss(SoftmaxLoss):
    """
    allennlp's full softmax with weights: embeddings (groups..., n, P), targets (groups..., n)
    softmax rows, weights (groups..., n) -> (groups...) the weighted sums of the targets'
    negative log likelihoods (nats). Weights 0/1 mark a batch's real targets, so the shapes are
    the batch's whatever its content. Groups are computed one after the other (the logits of
    one group at a time: n x rows).
    """

    @classmethod
    def with_parameters(
        cls, parameters: dict[str, torch.Tensor], num_words: int, embedding_dim: int
    ) -> "WeightedSoftmaxLoss":
        """A loss holding the parameters of a `SoftmaxLoss` with these arguments."""
        return rebuilt(cls, parameters, num_words, embedding_dim)

    def forward(  # type: ignore[override]  # weights added
        self,
        embeddings: torch.Tensor,
        targets: torch.Tensor,
        weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        return per_group(self._grouped, embeddings, targets, weights)

    def _grouped(
        self, embeddings: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """embeddings (G, n, P), targets, weights (G, n) -> (G,)."""
        losses = []
        for group_embeddings, group_targets, group_weights in zip(
            embeddings, targets, weights, strict=True
        ):
            logits = group_embeddings @ self.softmax_w + self.softmax_b
            log_probabilities = torch.nn.functional.log_softmax(logits, dim=-1)
            likelihoods = log_probabilities.gather(1, group_targets.unsqueeze(1)).squeeze(1)
            losses.append(-(likelihoods * group_weights).sum())
        return torch.stack(losses)
