"""The sampled softmax's negatives: distinct ids from the log-uniform distribution, drawn on the
device, and the expected count that corrects their logits."""

import math

import numpy as np
import torch


def expected_tries(num_words: int, num_samples: int) -> float:
    """T such that T draws with replacement from the log-uniform distribution over `num_words`
    ids give `num_samples` distinct ids in expectation: sum_k 1 - (1 - q(k))^T = num_samples."""
    ids = np.arange(num_words, dtype=np.float64)
    log_keep = np.log1p(-np.log1p(1.0 / (ids + 1.0)) / math.log(num_words + 1.0))
    low, high = float(num_samples), float(num_samples)
    while np.sum(-np.expm1(high * log_keep)) < num_samples:
        high *= 2.0
    for _ in range(100):  # bisection to float precision
        middle = 0.5 * (low + high)
        if np.sum(-np.expm1(middle * log_keep)) < num_samples:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


class LogUniformSampler:
    """
    `num_samples` distinct ids out of `num_words`, drawn on the device with no host round trip
    and a fixed output shape. Id k has probability q(k) = log((k + 2) / (k + 1)) / log(V + 1)
    (TensorFlow's `log_uniform_candidate_sampler`, bilm-tf's and allennlp's `SampledSoftmaxLoss`;
    frequent words first, as a vocabulary sorted by count has them).

    allennlp's `_choice` draws with replacement on the host until `num_samples` ids are distinct.
    The order in which new ids appear there is sampling without replacement proportional to q,
    and so is the top `num_samples` of log q(k) + Gumbel noise (Gumbel-top-k): the same
    distribution of sets, one `topk` over the vocabulary here.

    Expected count (the logit correction log E[count]): allennlp and TensorFlow use
    1 - (1 - q(k))^T with T the number of draws that run took, the probability that k is among
    T draws. Here T is `expected_tries`, the T at which T draws give `num_samples` distinct ids
    in expectation: the inclusion probabilities 1 - (1 - q(k))^T then sum to `num_samples`, as
    any without-replacement sample's must, and each is the successive-sampling estimate of
    P(k is drawn) (a run's own T scatters within about 1% of it).
    """

    def __init__(self, num_words: int, num_samples: int) -> None:
        if not 0 < num_samples < num_words:
            raise ValueError(
                f"num_samples must be between 1 and num_words - 1 = {num_words - 1}, "
                f"got {num_samples}"
            )
        self.num_words = num_words
        self.num_samples = num_samples
        self.tries = expected_tries(num_words, num_samples)
        self._probabilities: dict[torch.device, torch.Tensor] = {}

    def probabilities(self, device: torch.device) -> torch.Tensor:
        """(num_words,) q, made once per device."""
        if device not in self._probabilities:
            ids = torch.arange(self.num_words, device=device, dtype=torch.float64)
            self._probabilities[device] = self.probability(ids).float()
        return self._probabilities[device]

    def probability(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (...) -> q(ids) (...), in the dtype of floating `ids` (float32 otherwise)."""
        ids = ids if ids.is_floating_point() else ids.float()
        return torch.log1p(1.0 / (ids + 1.0)) / math.log(self.num_words + 1.0)

    def sample(self, device: torch.device, sets: int = 1) -> torch.Tensor:
        """(sets, num_samples): `sets` independent draws of distinct ids (int64, in no
        particular order: `topk` unsorted) on `device`, from torch's generator there."""
        # The top of log q + Gumbel noise = log q - log E (E ~ Exponential(1) = -log U) is the
        # top of q / E: one logarithm over the vocabulary.
        exponential = torch.rand(sets, self.num_words, device=device).log_().neg_()
        keys = self.probabilities(device) / exponential
        return keys.topk(self.num_samples, sorted=False).indices

    def expected_count(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (...) -> (...) float: 1 - (1 - q(id))^tries."""
        return -torch.expm1(self.tries * torch.log1p(-self.probability(ids)))
