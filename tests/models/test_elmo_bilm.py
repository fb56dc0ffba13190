import json
import math

import pytest
import torch
from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.models import Model
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.data.corpus_data_loader import fixed_shape_batch
from tests.helpers import (
    CONFIG_DIR,
    TINY_LSTM_OVERRIDES,
    TINY_TRANSFORMER_OVERRIDES,
    tiny_model_and_batches,
)


@pytest.fixture(scope="module")
def model_and_batches(tiny_corpus):
    """The tiny LSTM biLM and two batches of very different sizes (7 and 30 sentences)."""
    valid = tiny_corpus / "valid.txt"
    return tiny_model_and_batches("elmo_lstm.jsonnet", TINY_LSTM_OVERRIDES, valid, [7, 30])


def test_perplexities_are_token_weighted_over_the_whole_set(model_and_batches):
    model, batches = model_and_batches
    model.eval()
    model.get_metrics(reset=True)
    forward_nll = backward_nll = targets = 0.0
    with torch.no_grad():
        for batch in batches:
            output = model(**batch)
            count = float(output["batch_weight"])
            forward_nll += float(output["forward_loss"]) * count
            backward_nll += float(output["backward_loss"]) * count
            targets += count
    metrics = model.get_metrics(reset=True)
    assert metrics["forward_perplexity"] == pytest.approx(math.exp(forward_nll / targets), rel=1e-6)
    assert metrics["backward_perplexity"] == pytest.approx(
        math.exp(backward_nll / targets), rel=1e-6
    )
    assert metrics["perplexity"] == pytest.approx(
        math.exp((forward_nll + backward_nll) / (2 * targets)), rel=1e-6
    )


def test_loss_goes_down_when_training(model_and_batches):
    model, batches = model_and_batches
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = model(**batches[0])["loss"]
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_bilm_encoder_top_layer_is_the_language_model_input_to_the_softmax(model_and_batches):
    model, batches = model_and_batches
    model.eval()
    with torch.no_grad():
        output = model(**batches[1])
        layers, mask = model.bilm_encoder()(batches[1]["source"]["elmo"]["elmo_tokens"])
    assert len(layers) == 3
    assert torch.equal(mask, output["mask"])
    assert torch.allclose(layers[-1], output["lm_embeddings"], atol=1e-6)
    assert torch.allclose(layers[0][..., :16], output["noncontextual_token_embeddings"], atol=1e-6)


def test_perplexities_do_not_depend_on_batching_or_padding(model_and_batches):
    """allennlp-models scores a backward target at the first padding position; ours must not."""
    model, batches = model_and_batches
    model.eval()
    padded = batches[1]
    tokens = padded["source"]["tokens"]["tokens"]
    assert (tokens == 0).any(), "the batch must contain padding"
    with torch.no_grad():
        model.get_metrics(reset=True)
        model(**padded)
        batched = model.get_metrics(reset=True)
        for row in range(tokens.size(0)):
            length = int((tokens[row] > 0).sum())
            single = {
                "source": {
                    key: {name: t[row : row + 1, :length] for name, t in value.items()}
                    for key, value in padded["source"].items()
                }
            }
            model(**single)
        one_by_one = model.get_metrics(reset=True)
    for name in batched:
        assert batched[name] == pytest.approx(one_by_one[name], rel=1e-5)


def test_losses_equal_allennlp_models_language_model_on_sentences_without_padding(
    model_and_batches,
):
    """Our fixed-shape losses (every position, weighted) == allennlp-models' `LanguageModel`
    forward (the targets selected with `masked_select`) where it has no padding to misscore."""
    model, batches = model_and_batches
    model.eval()
    tokens = batches[1]["source"]["tokens"]["tokens"]
    with torch.no_grad():
        for row in range(4):
            length = int((tokens[row] > 0).sum())
            source = {
                key: {name: t[row : row + 1, :length] for name, t in value.items()}
                for key, value in batches[1]["source"].items()
            }
            ours, theirs = model(source), LanguageModel.forward(model, source)
            for key in ("loss", "forward_loss", "backward_loss", "batch_weight"):
                torch.testing.assert_close(ours[key], theirs[key], rtol=1e-6, atol=1e-6)


def test_bf16_mixed_precision_tracks_float32_losses(model_and_batches):
    """The same weights with `mixed_precision: bf16` give the float32 losses to bf16 accuracy,
    and gradients in float32 for every parameter."""
    model, batches = model_and_batches
    model.eval()
    with torch.no_grad():
        fp32 = model(**batches[1])
        model.mixed_precision = "bf16"
        try:
            bf16 = model(**batches[1])
        finally:
            model.mixed_precision = None
    for key in ("forward_loss", "backward_loss"):
        assert float(bf16[key]) == pytest.approx(float(fp32[key]), rel=2e-2)
        assert float(bf16[key]) != float(fp32[key])  # autocast did run in bf16
    assert bf16["lm_embeddings"].dtype == torch.bfloat16


def test_unknown_mixed_precision_is_a_configuration_error():
    from allennlp.common.checks import ConfigurationError

    params = Params.from_file(
        str(CONFIG_DIR / "elmo_lstm.jsonnet"), json.dumps({"model.mixed_precision": "fp8"})
    )
    with pytest.raises(ConfigurationError, match="mixed_precision must be one of"):
        Model.from_params(vocab=Vocabulary(), params=params.pop("model"))


NO_DROPOUT = {"model.dropout": 0.0, "model.contextualizer.dropout": 0.0}


@pytest.mark.parametrize(
    "config, sizes",
    [
        ("elmo_lstm.jsonnet", dict(TINY_LSTM_OVERRIDES, **NO_DROPOUT)),
        (
            "elmo_transformer.jsonnet",
            dict(
                TINY_TRANSFORMER_OVERRIDES,
                **NO_DROPOUT,
                **{"model.contextualizer.input_dropout": 0.0},
            ),
        ),
    ],
    ids=["lstm", "transformer"],
)
def test_a_fixed_shape_batch_gives_the_unpadded_loss_metrics_gradients_and_target_count(
    tiny_corpus, config, sizes
):
    """The loaders' `fixed_shape` padding (3 rows of nothing but padding, 5 more positions)
    changes nothing the model computes for training: the same loss, perplexities, parameter
    gradients and `batch_weight` (the targets `tokens_per_second` counts), nothing NaN."""
    valid = tiny_corpus / "valid.txt"
    model, (unpadded,) = tiny_model_and_batches(config, sizes, valid, [7], whole_file_vocab=False)
    rows, timesteps = unpadded["source"]["tokens"]["tokens"].shape
    padded = fixed_shape_batch(unpadded, rows + 3, timesteps + 5)
    results = []
    for tensors in (unpadded, padded):
        model.zero_grad(set_to_none=True)
        model.get_metrics(reset=True)
        output = model(**tensors)
        output["loss"].backward()
        gradients = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        assert all(torch.isfinite(g).all() for g in gradients.values())
        assert torch.isfinite(output["lm_embeddings"]).all()
        results.append((output, model.get_metrics(reset=True), gradients))
    (output, metrics, gradients), (padded_output, padded_metrics, padded_gradients) = results
    assert padded_output["loss"].item() == pytest.approx(output["loss"].item(), rel=1e-6)
    assert float(padded_output["batch_weight"]) == float(output["batch_weight"]) > 0
    assert padded_metrics == pytest.approx(metrics, rel=1e-6)
    assert padded_gradients.keys() == gradients.keys() and len(gradients) > 10
    for name, gradient in gradients.items():
        assert torch.allclose(padded_gradients[name], gradient, rtol=1e-5, atol=1e-7), name
