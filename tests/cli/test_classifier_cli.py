"""The classifier example end to end: `allennlp train` of training_config/classifier_elmo.jsonnet
(allennlp's basic_classifier with our ELMo embedder) on the bundled sentence forms, then
`evaluate` and `predict` with allennlp's own `text_classifier` predictor."""

import json

import pytest

from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    evaluation,
    hidden,
    predictions,
    run_allennlp_in_process,
    train_args,
)

DATA = REPO_ROOT / "fixtures" / "classification"
LABELS = {"conditional", "declarative", "imperative", "negated"}


def test_elmo_classifier_learns_sentence_forms_and_its_archive_stands_alone(
    tiny_bilm_archive, plugin_cwd
):
    values = {
        "train_data_path": str(DATA / "train.jsonl"),
        "validation_data_path": str(DATA / "valid.jsonl"),
        "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(tiny_bilm_archive),
        "model.seq2vec_encoder.input_size": 2 * 16 + 32,  # the tiny biLM's ELMo width + words
        "model.seq2vec_encoder.hidden_size": 32,
        "trainer.num_epochs": 6,
        "trainer.optimizer.lr": 0.01,
        "data_loader.batch_sampler.batch_size": 16,
    }
    out = plugin_cwd / "classifier"
    config = CONFIG_DIR / "classifier_elmo.jsonnet"
    run_allennlp_in_process(train_args(config, out, values), cwd=plugin_cwd)
    metrics = json.loads((out / "metrics.json").read_text())
    # the majority label (declarative) is 46% of the validation sentences
    assert metrics["best_validation_accuracy"] > 0.8
    sentences = ["If the file is open , it may return a line .", "Copy the result ."]
    inputs = plugin_cwd / "input.jsonl"
    inputs.write_text("".join(json.dumps({"sentence": sentence}) + "\n" for sentence in sentences))
    archive = out / "model.tar.gz"
    with hidden(tiny_bilm_archive):  # allennlp drops pretrained_file: the archive stands alone
        evaluated = evaluation(
            archive, DATA / "valid.jsonl", plugin_cwd / "evaluated.json", cwd=plugin_cwd
        )
        predicted = predictions(archive, inputs, "--predictor", "text_classifier", cwd=plugin_cwd)
    assert evaluated["accuracy"] == pytest.approx(metrics["best_validation_accuracy"], abs=1e-6)
    assert len(predicted) == len(sentences)
    for prediction in predicted:
        assert prediction["label"] in LABELS
        assert sum(prediction["probs"]) == pytest.approx(1.0, abs=1e-5)
