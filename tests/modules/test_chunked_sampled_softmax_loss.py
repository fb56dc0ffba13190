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


def allennlps_training_loss(loss, embeddings, targets, sampled, tries):
    """allennlp's own `SampledSoftmaxLoss._forward_train`, its sampler made to return `sampled`
    after `tries` tries."""
    loss.choice_func = lambda num_words, num_samples: (sampled.numpy(), tries)
    return SampledSoftmaxLoss._forward_train(loss, embeddings, targets, None)


@pytest.mark.parametrize("sparse", [False, True])
def test_training_loss_equals_allennlps_for_the_same_negatives_with_padding_weighted_out(sparse):
    """Two groups (the biLM's directions), each with its own negatives, positions of weight 0
    among the targets: values and every gradient equal allennlp's loss over each group's
    weighted positions alone, with allennlp's sampler returning the same negatives after
    `expected_tries` tries."""
    torch.manual_seed(3)
    drawn = SampledSoftmaxLoss(40, 6, 8, sparse=sparse)
    loss = ChunkedSampledSoftmaxLoss.with_parameters(drawn.state_dict(), 40, 6, 8, sparse)
    embeddings = torch.randn(2, 7, 6, requires_grad=True)
    targets = torch.tensor([[0, 3, 3, 39, 7, 1, 0], [5, 5, 2, 0, 0, 0, 0]])
    weights = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0]])
    sampled = loss.sampler.sample(torch.device("cpu"), sets=2)
    loss.sampler.sample = lambda device, sets: sampled
    ours = loss.train()(embeddings, targets, weights)
    ours.sum().backward()
    ours_gradients = [embeddings.grad.clone(), *(p.grad.to_dense() for p in loss.parameters())]
    embeddings.grad = None
    loss.zero_grad()
    theirs = torch.stack(
        [
            allennlps_training_loss(
                drawn.train(),
                embeddings[g][weights[g] > 0],
                targets[g][weights[g] > 0],
                sampled[g],
                loss.sampler.tries,
            )
            for g in range(2)
        ]
    )
    theirs.sum().backward()
    theirs_gradients = [embeddings.grad, *(p.grad.to_dense() for p in drawn.parameters())]
    torch.testing.assert_close(ours, theirs)
    for mine, reference in zip(ours_gradients, theirs_gradients, strict=True):
        torch.testing.assert_close(mine, reference)


def test_row_gradients_give_the_sparse_gradient_of_every_row_read_once():
    """With `row_gradients` the softmax's gradient is in its two `TableRows` (weights, biases):
    scattered onto the tables it equals the sparse embeddings' gradient, duplicates summed."""
    torch.manual_seed(4)
    drawn = SampledSoftmaxLoss(30, 5, 6, sparse=True)
    rows_loss = ChunkedSampledSoftmaxLoss.with_parameters(drawn.state_dict(), 30, 5, 6, True, True)
    sparse_loss = ChunkedSampledSoftmaxLoss.with_parameters(drawn.state_dict(), 30, 5, 6, True)
    embeddings, targets = torch.randn(2, 9, 5), torch.randint(0, 30, (2, 9))
    sampled = rows_loss.sampler.sample(torch.device("cpu"), sets=2)
    for loss in (rows_loss, sparse_loss):
        loss.sampler.sample = lambda device, sets: sampled
        loss.train()(embeddings, targets).sum().backward()
    tables_rows = rows_loss.touched.tables_rows()
    for rows, table in zip(tables_rows, sparse_loss.parameters(), strict=True):
        scattered = torch.zeros_like(rows.table).index_add_(0, rows.ids, rows.grad)
        torch.testing.assert_close(scattered, table.grad.coalesce().to_dense())
        assert rows.table.grad is None
