"""elmo_transformer through the CLI: the published-size config (its sizes; trained when shrunk) and
the demo config trained, evaluated, perplexity falling."""

import json
import math
from pathlib import Path

import pytest
from allennlp.common import Params

from tests.helpers import (
    CONFIG_DIR,
    FILTERS_2048,
    REPO_ROOT,
    TINY_TRANSFORMER_OVERRIDES,
    run_allennlp_in_process,
    train_args,
)


def write_tiny_corpus(folder: Path, train_lines: int, valid_lines: int) -> tuple[Path, Path]:
    """train.txt and valid.txt cut from the bundled demo corpus."""
    lines = (REPO_ROOT / "fixtures/demo_corpus/train/shard_0.txt").read_text().splitlines()
    train, valid = folder / "train.txt", folder / "valid.txt"
    train.write_text("\n".join(lines[:train_lines]) + "\n")
    valid.write_text("\n".join(lines[train_lines : train_lines + valid_lines]) + "\n")
    return train, valid


def test_original_config_has_the_published_sizes():
    params = Params.from_file(str(CONFIG_DIR / "elmo_transformer_original.jsonnet")).as_dict()
    model = params["model"]
    contextualizer = model["contextualizer"]
    char_cnn = model["text_field_embedder"]["token_embedders"]["elmo"]
    assert contextualizer["type"] == "elmo_transformer"
    keys = ("num_layers", "input_dim", "feedforward_hidden_dim")
    assert [contextualizer[key] for key in keys] == [6, 512, 2048]
    assert char_cnn["filters"] == FILTERS_2048
    assert (char_cnn["num_highway"], char_cnn["projection_dim"]) == (2, 512)
    assert model["num_samples"] == 8192 and params["trainer"]["cuda_device"] == 0


def test_original_config_trains_through_the_cli_when_shrunk(tmp_path):
    """elmo_transformer_original.jsonnet with sizes, negatives and device overridden down: it
    trains with sampled softmax and then predicts the validation text better than uniformly."""
    train, valid = write_tiny_corpus(tmp_path, train_lines=160, valid_lines=40)
    values = {
        "train_data_path": str(train),
        "validation_data_path": str(valid),
        "vocabulary.min_count.tokens": 1,
        "model.text_field_embedder.token_embedders.elmo.filters": [
            [1, 8],
            [2, 8],
            [3, 16],
            [4, 16],
        ],
        "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
        "model.contextualizer.input_dim": 16,
        "model.contextualizer.feedforward_hidden_dim": 32,
        "model.contextualizer.num_layers": 2,
        "model.contextualizer.num_attention_heads": 2,
        "model.num_samples": 20,
        "data_loader.batch_size": 16,
        "trainer.num_epochs": 3,
        "trainer.cuda_device": -1,
        "trainer.learning_rate_scheduler.warmup_steps": 2,
        "trainer.learning_rate_scheduler.factor": 1.0,
    }
    out = tmp_path / "model"
    run_allennlp_in_process(
        train_args(CONFIG_DIR / "elmo_transformer_original.jsonnet", out, values)
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert math.isfinite(metrics["training_loss"])
    vocab_size = len((out / "vocabulary" / "tokens.txt").read_text().splitlines())
    assert 1 < metrics["validation_perplexity"] < vocab_size  # better than uniform


def test_demo_config_trains_and_evaluates_through_the_cli(tmp_path):
    """elmo_transformer.jsonnet shrunk, 2 epochs; `allennlp evaluate` reports the perplexities
    and validation perplexity falls from epoch to epoch."""
    train, valid = write_tiny_corpus(tmp_path, train_lines=160, valid_lines=40)
    out = tmp_path / "model"
    values = dict(
        TINY_TRANSFORMER_OVERRIDES,
        train_data_path=str(train),
        validation_data_path=str(valid),
        **{"trainer.num_epochs": 2, "trainer.optimizer.lr": 0.003},
    )
    run_allennlp_in_process(train_args(CONFIG_DIR / "elmo_transformer.jsonnet", out, values))
    epochs = [json.loads((out / f"metrics_epoch_{epoch}.json").read_text()) for epoch in range(2)]
    assert epochs[1]["validation_perplexity"] < epochs[0]["validation_perplexity"]

    metrics_file = tmp_path / "evaluation.json"
    result = run_allennlp_in_process(
        ["evaluate", str(out / "model.tar.gz"), str(valid), "--output-file", str(metrics_file)]
    )
    printed = result.stdout + result.stderr
    for name in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert name in printed
    metrics = json.loads(metrics_file.read_text())
    expected = math.exp(
        0.5 * (math.log(metrics["forward_perplexity"]) + math.log(metrics["backward_perplexity"]))
    )
    assert metrics["perplexity"] == pytest.approx(expected, rel=1e-6)
    assert metrics["perplexity"] == pytest.approx(epochs[1]["validation_perplexity"], rel=1e-4)
