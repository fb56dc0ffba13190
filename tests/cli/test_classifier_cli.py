"""The classifier example end to end: `allennlp train` of training_config/classifier_elmo.jsonnet
(allennlp's basic_classifier with our ELMo embedder) on the bundled sentence forms, then
`evaluate` and `predict` with allennlp's own `text_classifier` predictor."""

import json

import pytest

from tests.helpers import CONFIG_DIR, REPO_ROOT, hidden, overrides, run_allennlp_in_process

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
    config = str(CONFIG_DIR / "classifier_elmo.jsonnet")
    run_allennlp_in_process(
        ["train", config, "-s", str(out), "-o", overrides(values)], cwd=plugin_cwd
    )
    metrics = json.loads((out / "metrics.json").read_text())
    # the majority label (declarative) is 46% of the validation sentences
    assert metrics["best_validation_accuracy"] > 0.8
    sentences = ["If the file is open , it may return a line .", "Copy the result ."]
    (plugin_cwd / "input.jsonl").write_text(
        "".join(json.dumps({"sentence": sentence}) + "\n" for sentence in sentences)
    )
    with hidden(tiny_bilm_archive):  # allennlp drops pretrained_file: the archive stands alone
        run_allennlp_in_process(
            [
                "evaluate",
                str(out / "model.tar.gz"),
                str(DATA / "valid.jsonl"),
                "--output-file",
                "evaluated.json",
            ],
            cwd=plugin_cwd,
        )
        run_allennlp_in_process(
            [
                "predict",
                str(out / "model.tar.gz"),
                "input.jsonl",
                "--predictor",
                "text_classifier",
                "--output-file",
                "predicted.jsonl",
                "--silent",
            ],
            cwd=plugin_cwd,
        )
    evaluated = json.loads((plugin_cwd / "evaluated.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(metrics["best_validation_accuracy"], abs=1e-6)
    predicted = [json.loads(line) for line in (plugin_cwd / "predicted.jsonl").open()]
    assert len(predicted) == len(sentences)
    for prediction in predicted:
        assert prediction["label"] in LABELS
        assert sum(prediction["probs"]) == pytest.approx(1.0, abs=1e-5)
