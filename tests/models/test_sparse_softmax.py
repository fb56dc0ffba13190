"""The sampled softmax as sparse embeddings: the same training as dense with Adagrad; evaluation
over chunks of softmax rows equals the unchunked full softmax."""

import json
import math
from typing import Optional

import pytest
import torch
from allennlp.common import Params
from allennlp.data import Batch, DatasetReader, Vocabulary
from allennlp.models import Model
from allennlp.modules.sampled_softmax_loss import SampledSoftmaxLoss
from allennlp.training.optimizers import Optimizer

from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.training.sparse_gradient_sync import torch_norms_sparse_gradients
from tests.helpers import CONFIG_DIR

# elmo_lstm_original.jsonnet shrunk, without dropout (two models must see the same forward).
TINY_ORIGINAL = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 4], [2, 4], [3, 8]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 8,
    "model.contextualizer.input_dim": 8,
    "model.contextualizer.cell_size": 16,
    "model.contextualizer.dropout": 0.0,
    "model.dropout": 0.0,
    "model.num_samples": 20,
}


def tiny_original_params(sparse: bool) -> Params:
    values = dict(
        TINY_ORIGINAL, **{"model.sparse_embeddings": sparse, "model.row_gradients": False}
    )
    return Params.from_file(str(CONFIG_DIR / "elmo_lstm_original.jsonnet"), json.dumps(values))


@pytest.fixture(scope="module")
def vocab_and_batches(tiny_corpus):
    reader = DatasetReader.from_params(tiny_original_params(True).pop("dataset_reader"))
    instances = list(reader.read(str(tiny_corpus / "valid.txt")))
    vocab = Vocabulary.from_instances(instances)
    batches = []
    for start in range(0, 48, 16):
        batch = Batch(instances[start : start + 16])
        batch.index_instances(vocab)
        batches.append(batch.as_tensor_dict())
    return vocab, batches


def build(
    vocab: Vocabulary, sparse: bool, like: Optional[ElmoLanguageModel] = None
) -> ElmoLanguageModel:
    """The tiny original biLM; with `like`, holding `like`'s parameter values."""
    torch.manual_seed(0)
    model = Model.from_params(vocab=vocab, params=tiny_original_params(sparse).pop("model"))
    assert isinstance(model, ElmoLanguageModel)
    if like is not None:
        shared = {k: v for k, v in like.state_dict().items() if "_softmax_loss" not in k}
        model.load_state_dict(shared, strict=False)
        with torch.no_grad():
            for mine, theirs in zip(model.softmax_matrices(), like.softmax_matrices(), strict=True):
                mine.copy_(theirs)
    return model


def adagrad(model: Model) -> torch.optim.Optimizer:
    settings = tiny_original_params(False).pop("trainer").pop("optimizer")
    return Optimizer.from_params(model_parameters=list(model.named_parameters()), params=settings)


def train_step(
    model: Model, optimizer: torch.optim.Optimizer, batch, step: int, grad_norm: float
) -> float:
    """One allennlp-trainer-like step (zero_grad, backward, clip_grad_norm_, step); the sampled
    negatives are drawn from torch's generator, seeded by `step`. Returns the gradient norm."""
    torch.manual_seed(step)
    optimizer.zero_grad()
    model(**batch)["loss"].backward()
    norm = torch.nn.utils.clip_grad_norm_(
        [p for p in model.parameters() if p.grad is not None], grad_norm
    )
    optimizer.step()
    return float(norm)


def test_sparse_adagrad_training_equals_dense_and_leaves_untouched_rows_alone(vocab_and_batches):
    """3 Adagrad steps (the original config's: lr 0.2, initial accumulator 1.0) with gradient-norm
    clipping that bites: every parameter and accumulator equal to float rounding; the gradient
    norms too; softmax rows that no step touched keep their weights and accumulators bit for bit."""
    if not torch_norms_sparse_gradients():  # allennlp's trainer is refused there too
        pytest.skip(f"torch {torch.__version__} cannot clip sparse gradients (2.14 can)")
    vocab, batches = vocab_and_batches
    dense = build(vocab, sparse=False)
    sparse = build(vocab, sparse=True, like=dense)
    assert sparse._softmax_loss.softmax_w.weight.requires_grad and sparse._softmax_loss.sparse
    initial_weight = dense.softmax_matrices()[0].detach().clone()
    dense_adagrad, sparse_adagrad = adagrad(dense), adagrad(sparse)
    touched = torch.zeros(initial_weight.size(0), dtype=torch.bool)
    for step, batch in enumerate(batches):
        dense.train(), sparse.train()
        dense_norm = train_step(dense, dense_adagrad, batch, step, grad_norm=0.1)
        sparse_norm = train_step(sparse, sparse_adagrad, batch, step, grad_norm=0.1)
        assert (
            sparse_norm == pytest.approx(dense_norm, rel=1e-5) and dense_norm > 0.1
        )  # clipping bites
        touched |= (
            sparse._softmax_loss.softmax_w.weight.grad.coalesce().to_dense().abs().sum(dim=1) > 0
        )
    assert 0 < touched.sum() < touched.numel()
    for mine, theirs in zip(sparse.softmax_matrices(), dense.softmax_matrices(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    sparse_weight = sparse.softmax_matrices()[0]
    assert torch.equal(sparse_weight[~touched], initial_weight[~touched])
    accumulator = sparse_adagrad.state[sparse._softmax_loss.softmax_w.weight]["sum"]
    assert torch.equal(accumulator[~touched], torch.ones_like(accumulator[~touched]))
    torch.testing.assert_close(
        accumulator, dense_adagrad.state[dense._softmax_loss.softmax_w]["sum"], rtol=1e-5, atol=1e-6
    )
    for name, parameter in dense.named_parameters():
        if "_softmax_loss" not in name:
            torch.testing.assert_close(
                dict(sparse.named_parameters())[name], parameter, rtol=1e-5, atol=1e-6
            )


@pytest.mark.parametrize("sparse", [False, True])
def test_chunked_evaluation_equals_the_unchunked_full_softmax(vocab_and_batches, sparse):
    """Evaluation losses and perplexities with 7-row chunks (not dividing the rows) == one chunk
    holding every row (allennlp's computation), values and gradients."""
    vocab, batches = vocab_and_batches
    model = build(vocab, sparse=sparse).eval()
    results = {}
    for name, max_eval_logits in [("unchunked", 2**40), ("chunked", 1)]:
        model._softmax_loss.max_eval_logits = max_eval_logits
        model.get_metrics(reset=True)
        model.zero_grad()
        losses = [model(**batch)["loss"] for batch in batches]
        sum(losses).backward()
        gradients = [p.grad.to_dense().clone() for p in model._softmax_loss.parameters()]
        results[name] = (torch.stack(losses).detach(), model.get_metrics(reset=True), gradients)
    (loss, metrics, grads), (chunked_loss, chunked_metrics, chunked_grads) = (
        results["unchunked"],
        results["chunked"],
    )
    torch.testing.assert_close(chunked_loss, loss, rtol=1e-5, atol=0)
    assert chunked_metrics == pytest.approx(metrics, rel=1e-5)
    assert all(math.isfinite(value) for value in metrics.values())
    for mine, theirs in zip(chunked_grads, grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6)


def test_unchunked_reference_is_allennlps_own_full_softmax(vocab_and_batches):
    """The 'unchunked' setting above computes what allennlp's `SampledSoftmaxLoss` does."""
    vocab, _ = vocab_and_batches
    loss = build(vocab, sparse=False)._softmax_loss.eval()
    embeddings = torch.randn(30, loss._embedding_dim)
    targets = torch.randint(0, loss._num_words, (30,))
    loss.max_eval_logits = 5
    torch.testing.assert_close(
        loss(embeddings, targets), SampledSoftmaxLoss._forward_eval(loss, embeddings, targets)
    )


def test_evaluation_computes_the_weighted_positions_only_as_allennlps_full_softmax(
    vocab_and_batches,
):
    """Groups of positions, some of weight 0 (padding: any embedding, any target) -> per group
    the weighted sum of allennlp's full-softmax losses over the other positions."""
    vocab, _ = vocab_and_batches
    loss = build(vocab, sparse=True)._softmax_loss.eval()
    loss.max_eval_logits = 5
    embeddings = torch.randn(2, 15, loss._embedding_dim)
    targets = torch.randint(0, loss._num_words, (2, 15))
    lengths = (9, 15)
    weights = (torch.arange(15) < torch.tensor(lengths).unsqueeze(1)).float() * 0.5
    embeddings[weights == 0] = 1e6
    expected = [
        0.5 * SampledSoftmaxLoss._forward_eval(loss, group[:length], target[:length])
        for group, target, length in zip(embeddings, targets, lengths, strict=True)
    ]
    torch.testing.assert_close(loss(embeddings, targets, weights), torch.stack(expected))


ADAGRAD = {"lr": 0.2, "initial_accumulator_value": 1.0}  # the original config's
# (row_gradients optimizer, sparse gradients optimizer)
OPTIMIZERS = {
    "adagrad": ({"type": "elmo_adagrad", **ADAGRAD}, {"type": "adagrad", **ADAGRAD}),
    "fused_adam": ({"type": "fused_adam", "lr": 0.01}, {"type": "fused_adam", "lr": 0.01}),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_row_gradients_train_as_sparse_gradients_with_the_same_norms(vocab_and_batches, optimizer):
    """3 clipped steps (clipping bites) with the same negatives: `row_gradients` with
    `elmo_adagrad` (`fused_adam`) gives the parameters, optimizer state and gradient norms that
    sparse gradients give with allennlp's `adagrad` (`fused_adam`)."""
    if not torch_norms_sparse_gradients():
        pytest.skip(f"torch {torch.__version__} cannot clip sparse gradients (2.14 can)")
    vocab, batches = vocab_and_batches
    values = dict(TINY_ORIGINAL, **{"model.row_gradients": True})
    params = Params.from_file(str(CONFIG_DIR / "elmo_lstm_original.jsonnet"), json.dumps(values))
    torch.manual_seed(0)
    rows = Model.from_params(vocab=vocab, params=params.pop("model"))
    sparse = build(vocab, sparse=True)
    sparse.load_state_dict(rows.state_dict())
    models = (rows, sparse)
    optimizers = [
        Optimizer.from_params(
            model_parameters=list(model.named_parameters()), params=Params(dict(settings))
        )
        for model, settings in zip(models, OPTIMIZERS[optimizer], strict=True)
    ]
    for step, batch in enumerate(batches):
        norms = [
            train_step(model, opt, batch, step, grad_norm=0.1)
            for model, opt in zip(models, optimizers, strict=True)
        ]
        assert norms[0] == pytest.approx(norms[1], rel=1e-5) and norms[1] > 0.1
    for name, parameter in sparse.state_dict().items():
        torch.testing.assert_close(rows.state_dict()[name], parameter, rtol=1e-5, atol=1e-6)
    tables = [model._softmax_loss.softmax_w.weight for model in models]
    for key, value in optimizers[1].state[tables[1]].items():
        mine = optimizers[0].state[tables[0]][key]
        torch.testing.assert_close(mine.float(), value.float(), rtol=1e-5, atol=1e-6)
