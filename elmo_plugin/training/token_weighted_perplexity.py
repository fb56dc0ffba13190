"""Metric: forward, backward and joint perplexity, token-weighted over the whole dataset."""

import math

import torch
from allennlp.nn.util import dist_reduce_sum
from allennlp.training.metrics.metric import Metric


@Metric.register("elmo_token_weighted_perplexity")
class TokenWeightedPerplexity(Metric):
    """
    Accumulates summed negative log likelihoods (nats) and target counts; reports
    exp(total NLL / total targets) per direction and exp of their mean as `perplexity`.
    Sums are reduced across distributed workers.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._forward_nll = 0.0
        self._backward_nll = 0.0
        self._targets = 0.0

    def __call__(  # type: ignore[override]  # three sums, not (predictions, gold_labels)
        self, forward_nll: torch.Tensor, backward_nll: torch.Tensor, num_targets: torch.Tensor
    ) -> None:
        self._forward_nll += dist_reduce_sum(float(forward_nll))
        self._backward_nll += dist_reduce_sum(float(backward_nll))
        self._targets += dist_reduce_sum(float(num_targets))

    def get_metric(self, reset: bool = False) -> dict[str, float]:
        targets = max(self._targets, 1.0)
        forward, backward = self._forward_nll / targets, self._backward_nll / targets
        metrics = {
            "forward_perplexity": math.exp(forward),
            "backward_perplexity": math.exp(backward),
            "perplexity": math.exp(0.5 * (forward + backward)),
        }
        if reset:
            self.reset()
        return metrics
