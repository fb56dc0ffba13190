"""One training per serialization folder, through the real `allennlp train`: a second `-r` on
a folder a run is training in is refused, naming the process, and writes no checkpoint or
metrics; once that run is gone (here: killed with SIGKILL) `-r` trains there again."""

import errno
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.test_pretraining_cli import DEMO, demo_callbacks
from tests.helpers import (
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    allennlp_process,
    run_allennlp,
    run_allennlp_in_process,
    start_forked,
    train_args,
)

LOCK = ".elmo_train.lock"


def opened_for_writing(fifo: Path, reader: subprocess.Popen, log: Path) -> int:
    """FIFO opened for writing once `reader` (a run's `hold_probe`) has it open -> the
    descriptor; fails the test with the run's log when it ends first."""
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if reader.poll() is not None:
            pytest.fail(f"the first run ended before it was held:\n{log.read_text()[-6000:]}")
        time.sleep(0.05)


def test_a_second_train_r_on_a_folder_in_training_is_refused_until_that_run_is_gone(
    tiny_corpus, tmp_path
):
    out, fifo, log = tmp_path / "out", tmp_path / "hold", tmp_path / "first.log"
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "shard_0.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{"trainer.num_epochs": 1, "trainer.callbacks": demo_callbacks("hold_probe")},
    )
    args = [*train_args(DEMO, out, values), "--include-package", "tests.cli.probes"]
    os.mkfifo(fifo)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(REPO_ROOT))
        patch.setenv("HOLD_PROBE_FIFO", str(fifo))
        command, env = allennlp_process(args)
        with open(log, "w") as first_log:
            first = start_forked(command, REPO_ROOT, env, stdout=first_log, stderr=first_log)
        writer = opened_for_writing(fifo, first, log)  # the first run waits before its batch 1
        try:
            fifo.unlink()  # no later run is held
            config = (out / "config.json").read_text()
            names = sorted(os.listdir(out))
            second = run_allennlp([*args, "-r"], check=False)
            assert first.poll() is None  # still held: the lock was not taken over
        finally:
            first.kill()
            first.wait()
            os.close(writer)
    assert first.returncode == -signal.SIGKILL
    error = second.stderr.strip().splitlines()[-1]  # allennlp's traceback ends with the message
    assert second.returncode == 1, second.stderr[-3000:]
    holder = (out / LOCK).read_text().split()[-1]  # the killed run's id, left in its lock
    assert f"{out} is being written by process {holder} (it holds {out / LOCK})" in error, error
    # nothing trained: no checkpoint, no metrics, no file that was not there
    assert sorted(os.listdir(out)) == names and (out / "config.json").read_text() == config
    assert not [*out.glob("*_state_e*"), *out.glob("metrics*")]

    run_allennlp_in_process([*args, "-r"])  # the killed run's lock is taken over
    assert json.loads((out / "metrics.json").read_text())["epoch"] == 0
    assert not (out / LOCK).exists()  # released when training ended
