"""`elmo_validation_checks` through the CLI: checks every N batches on a fixed validation sample,
logged to a file and TensorBoard, the best check archived, the running training metrics left
alone, and a run killed mid-epoch and resumed with -r has the uninterrupted run's check history."""

import json
from pathlib import Path

import pytest
from allennlp.models.archival import load_archive

from tests.cli.test_exact_resume_cli import CONFIG, KILLED_AT, shrunk_original
from tests.helpers import overrides, run_allennlp_in_process, train_with_probes
from tests.training.test_tensorboard_callbacks import read_scalars

CHECKS = {"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 2}


def deterministic(tiny_corpus: Path, checks: bool) -> dict:
    """The shrunk original without randomness after the start (no dropout, full softmax), so a
    resumed run computes what the uninterrupted one did."""
    values = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    values.update(
        {
            "model.dropout": 0.0,
            "model.contextualizer.dropout": 0.0,
            "model.num_samples": None,
            "model.sparse_embeddings": False,
        }
    )
    values["trainer.callbacks"] = values["trainer.callbacks"] + ([CHECKS] if checks else [])
    return values


def history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "validation_checks.jsonl").read_text().splitlines()]


def test_checks_are_logged_archived_and_resumed_exactly(tiny_corpus, tmp_path):
    values = deterministic(tiny_corpus, checks=True)
    train = lambda out, record, **kw: train_with_probes(CONFIG, values, out, record, **kw)  # noqa: E731
    train(tmp_path / "whole", tmp_path / "whole-record")
    whole = history(tmp_path / "whole")
    batches = [check["batch"] for check in whole]
    assert batches == list(range(4, 4 * len(batches) + 1, 4)) and len(batches) >= 4
    assert whole[0]["best"] and all(check["metrics"]["perplexity"] > 1 for check in whole)
    best = min(whole, key=lambda check: check["metrics"]["perplexity"])
    assert [check["best"] for check in whole].count(True) >= 1 and best["best"]

    # TensorBoard: each metric with the global batch as its step
    logged = read_scalars(tmp_path / "whole" / "log" / "checks")["perplexity"]
    assert logged == pytest.approx({c["batch"]: c["metrics"]["perplexity"] for c in whole})

    # the best check's weights, archived beside allennlp's model.tar.gz
    archived = load_archive(str(tmp_path / "whole" / "model_best_check.tar.gz"))
    assert archived.model is not None

    # a run killed mid-epoch after a checkpoint and resumed: the same history
    killed = train(tmp_path / "cut", tmp_path / "killed", kill=",".join(map(str, KILLED_AT)))
    assert killed.returncode != 0
    train(tmp_path / "cut", tmp_path / "resumed", resume=True)
    resumed = history(tmp_path / "cut")
    assert [c["batch"] for c in resumed] == batches
    assert [c["best"] for c in resumed] == [c["best"] for c in whole]
    for ours, theirs in zip(resumed, whole, strict=True):
        assert ours["metrics"] == pytest.approx(theirs["metrics"], rel=1e-5)


def test_checks_leave_the_training_metrics_alone(tiny_corpus, tmp_path):
    for name, checks in (("with", True), ("without", False)):
        values = deterministic(tiny_corpus, checks)
        values["trainer.num_epochs"] = 1
        values["trainer.callbacks"] = [{"type": "elmo_corpus_resume"}] + (
            [CHECKS] if checks else []
        )
        run_allennlp_in_process(
            ["train", CONFIG, "-s", str(tmp_path / name), "-o", overrides(values)]
        )
    metrics = [
        json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("with", "without")
    ]
    for key in ("training_perplexity", "validation_perplexity"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-6)
