"""Metric: forward, backward and joint perplexity, token-weighted over the whole dataset."""

import math
from typing import Optional

import torch
from allennlp.nn.util import dist_reduce_sum
from allennlp.training.metrics.metric import Metric

from elmo_plugin.training.lagged_readback import LaggedReadback


@Metric.register("elmo_token_weighted_perplexity")
class TokenWeightedPerplexity(Metric):
    """
    Accumulates summed negative log likelihoods (nats) and target counts on their device, in
    place in one buffer (a step captured in a CUDA graph keeps adding into it), read on the host
    only by `get_metric`; reports exp(total NLL / total targets) per direction and exp of their
    mean as `perplexity`. On a GPU `get_metric(reset=False)` (the trainer's progress bar, every
    batch) gives the totals of its previous call (`LaggedReadback`: no wait for the step just
    queued); `reset=True` (an epoch's, a validation's figures) the exact totals. Under
    distributed training `get_metric` sums every process's totals (every process calls it, as
    allennlp's trainer does).
    """

    def __init__(self) -> None:
        self._totals: Optional[torch.Tensor] = None  # (forward NLL, backward NLL, targets)
        self._readback = LaggedReadback()

    def reset(self) -> None:
        if self._totals is not None:
            self._totals.zero_()
        self._readback = LaggedReadback()

    def __call__(  # type: ignore[override]  # three sums, not (predictions, gold_labels)
        self, forward_nll: torch.Tensor, backward_nll: torch.Tensor, num_targets: torch.Tensor
    ) -> None:
        sums = torch.stack([forward_nll, backward_nll, num_targets]).detach().double()
        if self._totals is None:
            self._totals = torch.zeros_like(sums)
        self._totals = self._totals.to(sums.device)
        self._totals.add_(sums)

    def get_metric(self, reset: bool = False) -> dict[str, float]:
        totals = torch.zeros(3, dtype=torch.float64) if self._totals is None else self._totals
        totals = dist_reduce_sum(totals)
        forward_nll, backward_nll, targets = (
            totals if reset else self._readback.read(totals)
        ).tolist()
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
