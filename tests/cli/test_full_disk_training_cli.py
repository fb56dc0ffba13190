"""A full disk under `allennlp train` (a shipped pretraining config, a downstream one) and
`allennlp elmo-continue` (a tiny release), through the real CLI: the run stops with one last line
naming the file and saying the disk is full, no writer thread's traceback, no checkpoint file cut
short under its name; after a checkpoint stopped midway, `-r` with room resumes. A full disk is a
file-size limit (`tests/cli/file_size_limit.py`). At tiny sizes on one shard of the tiny corpus a
model state file is 140-160 kB and a training state 290-330 kB, so 200 kB stops the first
checkpoint's training state; with every parameter's statistics logged at every batch the training
event file passes 50 kB within the first epoch, before any checkpoint. allennlp's own metrics
files (under 1 kB) are stopped by a limit set once training starts (`file_size_probe`)."""

import json
import os
import zipfile
from pathlib import Path
from typing import Optional

import pytest
import torch

from tests.helpers import (
    CONFIG_DIR,
    TINY_LSTM_OVERRIDES,
    TINY_TAGGER_OVERRIDES,
    run_allennlp,
    run_allennlp_in_process,
    run_forked,
    train_args,
)

CHECKPOINT_LIMIT, EVENTS_LIMIT = 200_000, 50_000
EVERY_BATCHS_STATISTICS = {  # trainer.callbacks.1 is elmo_tensorboard
    "trainer.callbacks.1.summary_interval": 1,
    "trainer.callbacks.1.should_log_parameter_statistics": True,
}
CASES = {
    "checkpoint": (CHECKPOINT_LIMIT, {}, "training_state_e1_b0.th"),
    "event-file": (EVENTS_LIMIT, EVERY_BATCHS_STATISTICS, "log/train/events.out.tfevents."),
}
# pos_tagger_baseline.jsonnet on the tiny tagged data: a model state of about 230 kB, a training
# state of 460 kB, 80 kB of events an epoch with every batch's statistics, an out.log of 23 kB
DOWNSTREAM_CASES = {
    "checkpoint": (300_000, {}, "training_state_e1_b0.th"),
    "event-file": (
        40_000,
        EVERY_BATCHS_STATISTICS,
        "log/train/events.out.tfevents.",
    ),
}


@pytest.fixture(scope="module")
def release(tiny_bilm_archive, tmp_path_factory) -> Path:
    """The session's tiny biLM as ELMo files (`elmo-export`)."""
    folder = tmp_path_factory.mktemp("full_disk_release") / "elmo"
    run_allennlp_in_process(["elmo-export", str(tiny_bilm_archive), str(folder)])
    return folder


def limited(args: list[str], cwd: Path, limit: int):
    """`allennlp ARGS` in a process of its own whose files may not grow past `limit` bytes."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return run_forked(["-m", "tests.cli.file_size_limit", str(limit), *args], cwd, env, 300)


def assert_stopped_by_a_full_disk(result, out: Path, named: str, last_line_start: str) -> None:
    """Exit status 1, no thread's traceback, the last line naming `named` (under `out`) and a
    full disk; every checkpoint file under its name whole, no temporary file left."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Exception in thread" not in result.stderr, result.stderr[-6000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{last_line_start}cannot write {out}/{named}"), last
    assert ": the disk is full (File too large)" in last, last
    for path in out.glob("*_state_e*_b*.th"):
        assert zipfile.is_zipfile(path), path
        torch.load(path)
    assert not list(out.glob(".*.partial")), list(out.iterdir())


def resumes(args: list[str], out: Path, cwd: Optional[Path] = None) -> None:
    """`allennlp ARGS -r` (in this process) goes on from the stopped run and ends with its
    archive."""
    resumed = run_allennlp_in_process([*args, "-r"], cwd)
    assert "Recovering from prior training" in resumed.stderr
    assert (out / "model.tar.gz").is_file()


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_full_disk_stops_allennlp_train_with_one_line(case, tiny_corpus, tmp_path):
    """With the checkpoint case's model state saved and its training state not, `-r` resumes."""
    limit, logged, named = CASES[case]
    out = tmp_path / "model"
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "shard_0.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{"trainer.num_epochs": 1},
    )
    args = train_args(CONFIG_DIR / "elmo_lstm.jsonnet", out, {**values, **logged})
    stopped = limited(args, tmp_path, limit)
    assert_stopped_by_a_full_disk(stopped, out, named, "elmo_plugin.data.full_disk.DiskFull: ")
    if case == "checkpoint":
        resumes(args, out)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_full_disk_stops_elmo_continue_with_one_error_line(
    case, release, tiny_corpus, plugin_cwd
):
    """With the checkpoint case's model state saved and its training state not, `-r` resumes."""
    limit, logged, named = CASES[case]
    out = plugin_cwd / "continued"
    args = ["elmo-continue", str(release), "-s", str(out)]
    args += ["--train-data-path", str(tiny_corpus / "train" / "shard_0.txt")]
    args += ["--validation-data-path", str(tiny_corpus / "valid.txt")]
    args += ["-o", json.dumps({"trainer.num_epochs": 1, **logged})]
    stopped = limited(args, plugin_cwd, limit)
    assert_stopped_by_a_full_disk(stopped, out, named, "allennlp elmo-continue: error: ")
    if case == "checkpoint":
        resumes(args, out, plugin_cwd)


@pytest.mark.parametrize("case", DOWNSTREAM_CASES, ids=list(DOWNSTREAM_CASES))
def test_a_full_disk_stops_a_downstream_allennlp_train_with_one_line(
    case, tiny_tagged_data, tmp_path
):
    limit, logged, named = DOWNSTREAM_CASES[case]
    out = tmp_path / "tagger"
    values = {
        "train_data_path": str(tiny_tagged_data / "train.conllu"),
        "validation_data_path": str(tiny_tagged_data / "valid.conllu"),
        "trainer.num_epochs": 1,
        "data_loader.batch_sampler.batch_size": 8,
        **logged,
    }
    args = train_args(CONFIG_DIR / "pos_tagger_baseline.jsonnet", out, values)
    stopped = limited(args, tmp_path, limit)
    assert_stopped_by_a_full_disk(stopped, out, named, "elmo_plugin.data.full_disk.DiskFull: ")


def test_a_full_out_log_is_one_line_naming_it_and_the_run_goes_on(
    release, tiny_tagged_data, tmp_path
):
    """pos_tagger_elmo.jsonnet (its elmo_process_settings stops out.log) over the ELMo files of
    the tiny biLM (an archive would be extracted to files past the limit): out.log holds about
    32 kB when training starts and 40 kB after the first epoch, so at 35 kB it stops within the
    epoch; the first checkpoint (250 kB) then stops the run."""
    out = tmp_path / "tagger"
    values = {
        **TINY_TAGGER_OVERRIDES,
        "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(release),
        "train_data_path": str(tiny_tagged_data / "train.conllu"),
        "validation_data_path": str(tiny_tagged_data / "valid.conllu"),
        "trainer.num_epochs": 1,
        "data_loader.batch_sampler.batch_size": 8,
    }
    args = train_args(CONFIG_DIR / "pos_tagger_elmo.jsonnet", out, values)
    stopped = limited(args, tmp_path, 35_000)
    log = stopped.stdout + stopped.stderr
    assert "Logging error" not in log, log[-6000:]
    about_out_log = [line for line in log.splitlines() if "out.log" in line]
    assert len(about_out_log) == 1, about_out_log
    assert f"cannot write {out}/out.log: the disk is full (File too large)" in about_out_log[0]
    assert_stopped_by_a_full_disk(
        stopped, out, "model_state_e1_b0.th", "elmo_plugin.data.full_disk.DiskFull: "
    )


def test_a_full_disk_stops_allennlp_metrics_file_with_one_line(tiny_corpus, tmp_path, monkeypatch):
    """500 bytes from the first batch on (config and vocabulary written whole before): out.log,
    already past it, stops with its one line and the run goes on; `metrics_epoch_0.json` (about
    770 bytes, written before any checkpoint) stops it, leaving no metrics file cut short."""
    out = tmp_path / "model"
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "shard_0.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{
            "trainer.num_epochs": 1,
            "trainer.callbacks": [{"type": "elmo_process_settings"}, {"type": "file_size_probe"}],
        },
    )
    args = train_args(CONFIG_DIR / "elmo_lstm.jsonnet", out, values)
    monkeypatch.setenv("FILE_SIZE_PROBE_LIMIT", "500")
    stopped = run_allennlp([*args, "--include-package", "tests.cli.probes"], tmp_path, check=False)
    assert_stopped_by_a_full_disk(
        stopped, out, "metrics_epoch_0.json", "elmo_plugin.data.full_disk.DiskFull: "
    )
    assert f"cannot write {out}/out.log: the disk is full" in stopped.stderr, stopped.stderr[-3000:]
    assert not list(out.glob("metrics*.json"))
