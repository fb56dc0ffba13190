"""Metric: forward, backward and joint perplexity, token-weighted over the whole dataset."""

import math
from typing import Optional

import torch
from allennlp.nn.util import dist_reduce_sum
from allennlp.training.metrics.metric import Metric


@Metric.register("elmo_token_weighted_perplexity")
class TokenWeightedPerplexity(Metric):
    """
    Accumulates summed negative log likelihoods (nats) and target counts on their device, read
    on the host only by `get_metric`; reports exp(total NLL / total targets) per direction and
    exp of their mean as `perplexity`. Under distributed training `get_metric` sums every
    process's totals (every process calls it, as allennlp's trainer does).
    """

    def __init__(self) -> None:
        self._totals: Optional[torch.Tensor] = None  # (forward NLL, backward NLL, targets)

    def reset(self) -> None:
        self._totals = None

    def __call__(  # type: ignore[override]  # three sums, not (predictions, gold_labels)
        self, forward_nll: torch.Tensor, backward_nll: torch.Tensor, num_targets: torch.Tensor
    ) -> None:
        sums = torch.stack([forward_nll, backward_nll, num_targets]).detach().double()
        self._totals = sums if self._totals is None else self._totals + sums

    def get_metric(self, reset: bool = False) -> dict[str, float]:
        totals = torch.zeros(3, dtype=torch.float64) if self._totals is None else self._totals
        forward_nll, backward_nll, targets = dist_reduce_sum(totals).tolist()
        targets = max(targets, 1.0)
        forward, backward = forward_nll / targets, backward_nll / targets
        metrics = {
            "forward_perplexity": math.exp(forward),
            "backward_perplexity": math.exp(backward),
            "perplexity": math.exp(0.5 * (forward + backward)),
        }
        if reset:
            self.reset()
        return metrics
