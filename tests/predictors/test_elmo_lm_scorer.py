"""`elmo_lm_scorer` through `allennlp predict`: its perplexities are the model's own numbers."""

import json
import math

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Token
from allennlp.data.batch import Batch
from allennlp.models.archival import load_archive
from allennlp.predictors import Predictor

from tests.helpers import predict

WINDOW = 40  # elmo_lstm.jsonnet's max_sequence_length: evaluation scores longer lines in windows


def unpadded_model_nll(archive, windows):
    """Summed forward / backward negative log likelihoods from `elmo_bilm.forward`, one window
    per batch."""
    loaded = load_archive(str(archive))
    model, reader = loaded.model.eval(), loaded.validation_dataset_reader
    forward = backward = 0.0
    for window in windows:
        instance = reader.text_to_instance(tokens=[Token(t) for t in window])
        reader.apply_token_indexers(instance)
        batch = Batch([instance])
        batch.index_instances(model.vocab)
        with torch.no_grad():
            output = model(**batch.as_tensor_dict())
        forward += output["forward_loss"].item() * output["batch_weight"].item()
        backward += output["backward_loss"].item() * output["batch_weight"].item()
    return forward, backward


@pytest.mark.parametrize("archive", ["tiny_bilm_archive", "tiny_transformer_archive"])
def test_log_probs_are_the_models_own_numbers(archive, tiny_corpus, plugin_cwd, request):
    """Summed over the validation file (split into the reader's windows), the per-sentence log
    probabilities give the model's own losses and the forward perplexity `allennlp train` recorded,
    for an LSTM and a transformer biLM."""
    tiny_bilm_archive = request.getfixturevalue(archive)
    windows = []
    for line in (tiny_corpus / "valid.txt").read_text(encoding="utf-8").splitlines():
        tokens = line.split()
        windows += [tokens[start : start + WINDOW] for start in range(0, len(tokens), WINDOW)]
    inputs = [
        {"tokens": w} if i % 2 else {"sentence": " ".join(w), "top_k": 3}
        for i, w in enumerate(windows)
    ]
    outputs = predict(tiny_bilm_archive, plugin_cwd, inputs, "elmo_lm_scorer", 8)
    assert len(outputs) == len(windows)

    forward_nll = -sum(sum(o["forward_log_probs"]) for o in outputs)
    backward_nll = -sum(sum(o["backward_log_probs"]) for o in outputs)
    targets = sum(len(o["forward_log_probs"]) for o in outputs)
    assert targets == sum(len(w) + 1 for w in windows)
    # Forward: the perplexity `allennlp train` recorded for the archive (token-weighted, batched).
    metrics = json.loads((tiny_bilm_archive.parent / "metrics.json").read_text())
    assert math.exp(forward_nll / targets) == pytest.approx(
        metrics["best_validation_forward_perplexity"], rel=1e-4
    )
    # Both directions: the model's own losses, one sentence per batch. (Batched, allennlp-models'
    # LanguageModel also scores a bogus backward target at the first padding position of every
    # shorter sentence, so its batched backward numbers depend on padding.)
    model_forward, model_backward = unpadded_model_nll(tiny_bilm_archive, windows)
    assert forward_nll == pytest.approx(model_forward, rel=1e-5)
    assert backward_nll == pytest.approx(model_backward, rel=1e-5)

    for index, (window, output) in enumerate(zip(windows, outputs, strict=True)):
        k = 5 if index % 2 else 3
        n = len(window)
        assert output["tokens"] == window
        assert len(output["forward_log_probs"]) == len(output["backward_log_probs"]) == n + 1
        forward, backward = sum(output["forward_log_probs"]), sum(output["backward_log_probs"])
        assert output["forward_perplexity"] == pytest.approx(math.exp(-forward / (n + 1)), rel=1e-5)
        assert output["backward_perplexity"] == pytest.approx(
            math.exp(-backward / (n + 1)), rel=1e-5
        )
        assert output["perplexity"] == pytest.approx(
            math.exp(-(forward + backward) / (2 * (n + 1))), rel=1e-5
        )
        assert len(output["top_next"]) == len(output["top_previous"]) == n
        for position in range(n):
            next_word = window[position + 1] if position + 1 < n else "</S>"
            previous_word = window[position - 1] if position else "<S>"
            for top, word, log_prob in (
                (
                    output["top_next"][position],
                    next_word,
                    output["forward_log_probs"][position + 1],
                ),
                (
                    output["top_previous"][position],
                    previous_word,
                    output["backward_log_probs"][position],
                ),
            ):
                values = [entry["log_prob"] for entry in top]
                assert len(top) == k and values == sorted(values, reverse=True)
                assert sum(math.exp(v) for v in values) <= 1 + 1e-5
                assert values[0] >= log_prob - 1e-5  # nothing beats the most likely word
                for entry in top:  # a word in the top list has the probability it was scored with
                    if entry["word"] == word:
                        assert entry["log_prob"] == pytest.approx(log_prob, abs=1e-5)


def test_bad_inputs(tiny_bilm_archive):
    predictor = Predictor.from_path(str(tiny_bilm_archive), "elmo_lm_scorer")
    assert predictor.predict_json({"sentence": "", "top_k": 2})["top_next"] == []
    assert len(predictor.predict_json({"sentence": "the file"})["forward_log_probs"]) == 3
    with pytest.raises(ConfigurationError, match="top_k"):
        predictor.predict_json({"sentence": "the file", "top_k": -1})
    with pytest.raises(ConfigurationError, match="top_k"):  # `allennlp predict` names its line
        predictor.load_line('{"sentence": "the file", "top_k": -1}')
    with pytest.raises(ConfigurationError, match="sentence"):
        predictor.predict_json({"text": "the file"})
