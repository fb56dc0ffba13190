"""`elmo_validation_checks` through the CLI on the demo config (`elmo_lstm.jsonnet`, its
`elmo_corpus` loader and callbacks): checks every N batches on a fixed validation sample, logged
to a file and TensorBoard, the best check archived, a progress bar with a total and the time
left, the running training metrics left alone, a run killed mid-epoch and resumed with -r has
the uninterrupted run's check history; a missing validation path fails at the start, naming it,
and a schedule longer than the epoch is a warning."""

import json
import re
import signal
from pathlib import Path
from typing import Optional

import pytest
from allennlp.common import Params
from allennlp.models.archival import archive_model, load_archive

from tests.cli.test_exact_resume_cli import KILL, SAVED_AT
from tests.helpers import (
    CONFIG_DIR,
    TINY_LSTM_OVERRIDES,
    run_allennlp_in_process,
    train_args,
    train_with_probes,
)
from tests.training.test_tensorboard_callbacks import read_scalars

CONFIG = str(CONFIG_DIR / "elmo_lstm.jsonnet")
CHECKS = {"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 2}


def demo_callbacks(checks: Optional[dict]) -> list[dict]:
    """The demo config's callbacks, its validation checks replaced by `checks` (None: none)."""
    shipped = Params.from_file(CONFIG).as_dict()["trainer"]["callbacks"]
    kept = [c for c in shipped if c["type"] != "elmo_validation_checks"]
    return kept + ([checks] if checks else [])


def deterministic(tiny_corpus: Path, checks: Optional[dict]) -> dict:
    """The demo config at tiny sizes without randomness after the start (no dropout), with a
    checkpoint every SAVED_AT batches (the last before the kill at KILL's batch), so a resumed
    run computes what the uninterrupted one did."""
    return {
        **TINY_LSTM_OVERRIDES,
        "train_data_path": str(tiny_corpus / "train" / "*.txt"),
        "validation_data_path": str(tiny_corpus / "valid.txt"),
        "vocabulary.min_count.tokens": 1,
        "data_loader.batch_size": 16,  # 24 batches an epoch, 4 a chunk
        "data_loader.chunk_bytes": 4000,  # several chunks per shard: the kill is mid-chunk
        "model.dropout": 0.0,
        "model.contextualizer.dropout": 0.0,
        "trainer.num_epochs": 2,
        "trainer.checkpointer.save_every_num_batches": SAVED_AT,
        "trainer.callbacks": [*demo_callbacks(checks), {"type": "batch_recorder"}],
    }


def history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "validation_checks.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_checks_are_logged_archived_and_resumed_exactly(tiny_corpus, tmp_path):
    values = deterministic(tiny_corpus, CHECKS)
    train = lambda out, record, **kw: train_with_probes(CONFIG, values, out, record, **kw)  # noqa: E731
    log = train(tmp_path / "whole", tmp_path / "whole-record")
    whole = history(tmp_path / "whole")
    batches = [check["batch"] for check in whole]
    assert batches == list(range(4, 4 * len(batches) + 1, 4)) and len(batches) >= 4
    assert whole[0]["best"] and all(check["metrics"]["perplexity"] > 1 for check in whole)
    best = min(whole, key=lambda check: check["metrics"]["perplexity"])
    assert [check["best"] for check in whole].count(True) >= 1 and best["best"]

    # the progress bar has a total and the time left: "k/N [elapsed<remaining"
    output = log.stdout + log.stderr
    assert re.search(r" (\d+)/\1 \[\d\d:\d\d<\d\d:\d\d", output), output[-3000:]

    # TensorBoard: each metric with the global batch as its step
    logged = read_scalars(tmp_path / "whole" / "log" / "checks")["perplexity"]
    assert logged == pytest.approx({c["batch"]: c["metrics"]["perplexity"] for c in whole})

    # the best check's weights, archived beside allennlp's model.tar.gz
    archived = load_archive(str(tmp_path / "whole" / "model_best_check.tar.gz"))
    assert archived.model is not None

    # a run killed mid-epoch after a checkpoint and resumed: the same history
    killed = train(tmp_path / "cut", tmp_path / "killed", kill=KILL)
    assert killed.returncode == -signal.SIGKILL
    # stopped early: the best check so far archived from the killed run's folder (docs)
    archive_model(str(tmp_path / "cut"), "best_check.th", str(tmp_path / "early.tar.gz"))
    assert load_archive(str(tmp_path / "early.tar.gz")).model is not None
    # a link planted at the best check's archive: replaced by the archive, its target kept
    (tmp_path / "victim.txt").write_text("kept")
    (tmp_path / "cut" / "model_best_check.tar.gz").symlink_to(tmp_path / "victim.txt")
    train(tmp_path / "cut", tmp_path / "resumed", resume=True)
    assert (tmp_path / "victim.txt").read_text() == "kept"
    assert not (tmp_path / "cut" / "model_best_check.tar.gz").is_symlink()
    assert load_archive(str(tmp_path / "cut" / "model_best_check.tar.gz")).model is not None
    resumed = history(tmp_path / "cut")
    assert [c["batch"] for c in resumed] == batches
    assert [c["best"] for c in resumed] == [c["best"] for c in whole]
    for ours, theirs in zip(resumed, whole, strict=True):
        assert ours["metrics"] == pytest.approx(theirs["metrics"], rel=1e-5)


def test_checks_leave_the_training_metrics_alone_and_a_schedule_past_the_epoch_warns(
    tiny_corpus, tmp_path
):
    """Training metrics equal with checks and with a checks callback whose schedule is longer
    than the run (no check happens): that one warns at the start."""
    beyond = {**CHECKS, "every_num_batches": 10**6}
    outputs = []
    for name, checks in (("with", CHECKS), ("beyond", beyond)):
        values = deterministic(tiny_corpus, checks)
        values["trainer.num_epochs"] = 1
        values["trainer.callbacks"] = demo_callbacks(checks)
        result = run_allennlp_in_process(train_args(CONFIG, tmp_path / name, values))
        outputs.append(result.stdout + result.stderr)
    metrics = [
        json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("with", "beyond")
    ]
    for key in ("training_perplexity", "validation_perplexity"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-6)
    assert not (tmp_path / "beyond" / "validation_checks.jsonl").read_text()
    assert re.search(
        r"every_num_batches 1000000 is more than an epoch's \d+ batches: no check inside most "
        r"epochs, validation runs only at epoch ends",
        outputs[1],
    )
    assert "is more than an epoch" not in outputs[0]


def test_a_validation_path_that_does_not_exist_fails_at_the_start_naming_it(tiny_corpus, tmp_path):
    missing = str(tmp_path / "no_such_folder" / "valid*.txt")
    values = {**deterministic(tiny_corpus, CHECKS), "validation_data_path": missing}
    result = run_allennlp_in_process(train_args(CONFIG, tmp_path / "out", values), check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"elmo_corpus: no file matches {missing!r}" in output
    assert "Beginning training" not in output
    assert not list((tmp_path / "out").glob("*.th"))
