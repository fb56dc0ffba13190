"""modules/log_uniform_sampler: allennlp's rejection sampler's distribution, drawn on the device
at a fixed shape, with an expected count that matches how often each id is drawn."""

import numpy
import pytest
import torch
from allennlp.modules.sampled_softmax_loss import _choice
from scipy.stats import chi2_contingency  # type: ignore[import-untyped]
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.support.op_audit import OpAudit
from elmo_plugin.modules.log_uniform_sampler import LogUniformSampler, expected_tries

CPU = torch.device("cpu")


def inclusion_counts(sets: list[numpy.ndarray], num_words: int) -> numpy.ndarray:
    return numpy.bincount(numpy.concatenate(sets), minlength=num_words)


def test_expected_tries_give_num_samples_distinct_ids_and_match_allennlps_draws():
    """sum_k 1 - (1 - q_k)^T = num_samples at T = expected_tries; at the original config's sizes T
    is where allennlp's `_choice` ends (its tries scatter within about 1% of it)."""
    sampler = LogUniformSampler(793_471, 8192)
    ids = torch.arange(793_471, dtype=torch.float64)
    assert sampler.expected_count(ids).sum().item() == pytest.approx(8192, rel=1e-6)
    numpy.random.seed(0)
    tries = [_choice(793_471, 8192)[1] for _ in range(10)]
    assert sampler.tries == pytest.approx(numpy.mean(tries), rel=0.01)
    assert expected_tries(100, 10) == pytest.approx(expected_tries(100, 10))  # deterministic


def test_samples_are_distinct_ids_of_a_fixed_shape_drawn_without_host_reads():
    """(sets, num_samples) distinct ids in range, and the draw dispatches no syncing op."""
    sampler = LogUniformSampler(300, 40)
    with OpAudit() as audit:
        ids = sampler.sample(CPU, sets=3)
    assert ids.shape == (3, 40) and ids.dtype == torch.int64
    assert all(len(set(row.tolist())) == 40 for row in ids)
    assert 0 <= ids.min() and ids.max() < 300
    assert audit.syncs() == []


def test_id_frequencies_match_allennlps_rejection_sampler():
    """Chi-squared test of homogeneity: how often each of 60 ids is among 12 samples, over 3,000
    draws of each sampler (allennlp's `_choice` with numpy, ours with torch)."""
    num_words, num_samples, draws = 60, 12, 3000
    numpy.random.seed(1)
    theirs = inclusion_counts([_choice(num_words, num_samples)[0] for _ in range(draws)], num_words)
    torch.manual_seed(1)
    sampler = LogUniformSampler(num_words, num_samples)
    ours = inclusion_counts(list(sampler.sample(CPU, sets=draws).numpy()), num_words)
    assert ours.sum() == theirs.sum() == draws * num_samples
    _, p_value, _, _ = chi2_contingency(numpy.stack([ours, theirs]))
    assert p_value > 0.001


def test_expected_counts_match_empirical_inclusion_rates_as_closely_as_allennlps():
    """Over 20,000 draws of 20 of 200 ids: each id's inclusion rate against our expected count
    (constant tries) and against allennlp's (each draw's own tries, averaged): ours is within
    0.015 of every rate (the most frequent ids are drawn about 1% less often than either formula
    says at 10% of the vocabulary) and, on average, as close to the rates as allennlp's."""
    num_words, num_samples, draws = 200, 20, 20_000
    torch.manual_seed(2)
    sampler = LogUniformSampler(num_words, num_samples)
    rates = inclusion_counts(list(sampler.sample(CPU, sets=draws).numpy()), num_words) / draws
    ids = torch.arange(num_words)
    ours = sampler.expected_count(ids).numpy()
    numpy.random.seed(2)
    tries = [_choice(num_words, num_samples)[1] for _ in range(2000)]
    keep = torch.log1p(-sampler.probability(ids.double()))
    allennlps = numpy.mean([-torch.expm1(t * keep).numpy() for t in tries], axis=0)
    assert numpy.abs(ours - rates).max() < 0.015
    assert numpy.abs(ours - rates).mean() <= 1.1 * numpy.abs(allennlps - rates).mean()


class TopkCalls(TorchDispatchMode):
    """Records the `sorted` argument of every aten.topk."""

    def __init__(self) -> None:
        super().__init__()
        self.sorted: list[bool] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.topk:
            self.sorted.append(bool(args[4]) if len(args) > 4 else kwargs.get("sorted", True))
        return func(*args, **(kwargs or {}))


def test_the_draw_does_not_sort_what_it_draws():
    """A set of negatives has no order: the GPU step does not pay for sorting one."""
    with TopkCalls() as calls:
        LogUniformSampler(1000, 64).sample(CPU, sets=2)
    assert calls.sorted == [False]
