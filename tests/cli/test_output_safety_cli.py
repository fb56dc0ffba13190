"""Nothing lost, whatever the user does, through the real `allennlp` CLI: streams read as files
are, bad numbers refused."""

import os
import threading
from pathlib import Path

import h5py
import numpy
import pytest

from tests.helpers import REPO_ROOT, run_allennlp

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
TEXT = b"the file is open .\n\nreturn the value .\n"


@pytest.fixture
def root(plugin_cwd) -> Path:
    (plugin_cwd / "in.txt").write_bytes(TEXT)
    return plugin_cwd


def one_error_line(result) -> str:
    """The single `: error: ` line of a refused run (exit status 1, no traceback)."""
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if ": error: " in line]
    assert len(errors) == 1, output[-3000:]
    return errors[0]


def datasets(path: Path) -> dict:
    with h5py.File(path, "r") as vectors:
        return {name: vectors[name][()] for name in vectors}


def feed_fifo(path: Path, data: bytes) -> threading.Thread:
    """A thread that writes `data` into the FIFO `path` once a reader opens it."""

    def write() -> None:
        with open(path, "wb") as fifo:
            fifo.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_elmo_embed_reads_a_fifo_as_the_file_it_streams(root):
    os.mkfifo(root / "in.fifo")
    writer = feed_fifo(root / "in.fifo", TEXT)
    run_allennlp(["elmo-embed", str(BILM), "in.fifo", "fifo.hdf5", "--layers", "top"], cwd=root)
    writer.join(timeout=60)
    run_allennlp(["elmo-embed", str(BILM), "in.txt", "file.hdf5", "--layers", "top"], cwd=root)
    from_fifo, from_file = datasets(root / "fifo.hdf5"), datasets(root / "file.hdf5")
    assert sorted(from_fifo) == sorted(from_file)
    for name, value in from_file.items():
        numpy.testing.assert_array_equal(from_fifo[name], value)


def test_a_negative_token_cache_and_resume_of_a_fifo_are_one_line_errors(root):
    result = run_allennlp(
        ["elmo-embed", str(BILM), "in.txt", "o.hdf5", "--token-cache", "-5"], cwd=root, check=False
    )
    assert "--token-cache must be at least 0, got -5" in one_error_line(result)
    os.mkfifo(root / "in.fifo")
    result = run_allennlp(
        ["elmo-embed", str(BILM), "in.fifo", "o.hdf5", "--resume"], cwd=root, check=False
    )
    assert "--resume needs an input file, not the stream in.fifo" in one_error_line(result)
    assert not (root / "o.hdf5").exists() and not (root / "o.hdf5.partial").exists()
