"""modules/chunked_sampled_softmax_loss: built over the parameters allennlp already drew."""

import pytest
import torch
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss

from elmo_plugin.modules.chunked_sampled_softmax_loss import ChunkedSampledSoftmaxLoss


@pytest.mark.parametrize("sparse", [False, True])
def test_with_parameters_holds_the_same_tensors_and_draws_nothing(sparse):
    """What `elmo_bilm` does with the loss `LanguageModel` made: the chunked loss holds those very
    parameters (no copy, no second softmax) and leaves the random number generator as it was."""
    torch.manual_seed(0)
    drawn = SampledSoftmaxLoss(50, 8, 10, sparse=sparse)
    state = torch.random.get_rng_state()
    loss = ChunkedSampledSoftmaxLoss.with_parameters(
        drawn.state_dict(keep_vars=True), 50, 8, 10, sparse
    )
    assert torch.equal(torch.random.get_rng_state(), state)
    assert [id(p) for p in loss.parameters()] == [id(p) for p in drawn.parameters()]
    assert loss.sparse == sparse and loss._num_samples == 10
    embeddings, targets = torch.randn(6, 8), torch.tensor([0, 3, 3, 49, 7, 1])
    torch.testing.assert_close(loss.eval()(embeddings, targets), drawn.eval()(embeddings, targets))
