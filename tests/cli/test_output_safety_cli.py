"""Nothing lost, whatever the user does, through the real `allennlp` CLI: two runs on one output
(the second refused, the first's file complete), an output that is an input (refused, naming
both), a full disk (one line; `elmo-embed`'s partial file whole, for `--resume`), `--resume` with
another model, input or option (refused, naming it); streams read as files are, bad numbers
refused. A full disk is a file-size limit (`tests/cli/file_size_limit.py`).

`python -m tests.cli.test_output_safety_cli N` races two `elmo-embed` runs on one output N times
and prints how many races ended clean."""

import concurrent.futures
import errno
import fcntl
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import h5py
import numpy
import pytest

from elmo_plugin.commands.elmo_export import export_archive
from elmo_plugin.data import output_file
from elmo_plugin.data.output_file import LOCK_MARK
from tests.helpers import (
    REPO_ROOT,
    one_error_line,
    run_allennlp,
    run_allennlp_in_process,
    run_forked,
)

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
TEXT = b"the file is open .\n\nreturn the value .\n"


@pytest.fixture
def root(plugin_cwd) -> Path:
    (plugin_cwd / "in.txt").write_bytes(TEXT)
    return plugin_cwd


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


def embed_args(input_file: str, output: str = "out.hdf5") -> list[str]:
    return ["elmo-embed", str(BILM), input_file, output, "--layers", "top"]


def wait_for_lock_holder(lock: Path) -> str:
    """The process id written into `lock`, once there."""
    for _ in range(600):
        if lock.exists():
            return lock.read_text().removeprefix(LOCK_MARK).strip()
        time.sleep(0.1)
    raise AssertionError(f"no process ever held {lock}")


def test_a_second_elmo_embed_on_the_same_output_is_refused_and_the_first_completes(root):
    """The first run reads a FIFO, so it holds the output while the second starts."""
    os.mkfifo(root / "in.fifo")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(run_allennlp, embed_args("in.fifo"), root, 600, False)
        holder = wait_for_lock_holder(root / "out.hdf5.lock")
        second = run_allennlp(embed_args("in.txt"), cwd=root, check=False)
        line = one_error_line(second)
        assert f"out.hdf5 is being written by process {holder}" in line, line
        assert not (root / "out.hdf5").exists()
        feed_fifo(root / "in.fifo", TEXT).join(timeout=60)
        assert first.result().returncode == 0, first.result().stderr[-3000:]
    assert sorted(datasets(root / "out.hdf5")) == ["0", "1", "2", "sentence_to_index"]
    assert sorted(os.listdir(root)) == [".allennlp_plugins", "in.fifo", "in.txt", "out.hdf5"]


def race(root: Path, repetitions: int) -> int:
    """Starts two `elmo-embed` runs on one output at once, `repetitions` times; each time one run
    writes a readable file and the other is refused by the lock or runs after the first. Returns
    how many races had a refusal (the runs overlapped)."""
    (root / "in.txt").write_bytes(TEXT * 50)
    overlapped = 0
    for _ in range(repetitions):
        (root / "out.hdf5").unlink(missing_ok=True)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(run_allennlp, embed_args("in.txt"), root, 600, False) for _ in range(2)
            ]
            results = [run.result() for run in runs]
        refused = [result for result in results if result.returncode != 0]
        for result in refused:
            assert "out.hdf5 is being written by process" in one_error_line(result)
        assert len(refused) < 2
        overlapped += len(refused)
        assert len(datasets(root / "out.hdf5")) == 3 * 50 + 1
        assert sorted(os.listdir(root)) == [".allennlp_plugins", "in.txt", "out.hdf5"]
    return overlapped


def test_two_elmo_embed_runs_started_at_once_leave_one_readable_file(root):
    race(root, repetitions=3)


@pytest.mark.parametrize("command", ["elmo-export", "elmo-vocab"])
def test_export_and_vocab_are_refused_while_another_process_writes_their_output(root, command):
    if command == "elmo-export":
        (root / "elmo").mkdir()
        args, output, lock = (
            ["elmo-export", str(BILM), "elmo"],
            "elmo",
            root / "elmo" / ".elmo_export.lock",
        )
    else:
        args, output, lock = (
            ["elmo-vocab", "in.txt", "tokens.txt"],
            "tokens.txt",
            root / "tokens.txt.lock",
        )
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"{os.getpid()}\n")
        held.flush()
        line = one_error_line(run_allennlp(args, cwd=root, check=False))
    assert f"{output} is being written by process {os.getpid()}" in line, line
    assert lock.exists() and not (root / "tokens.txt").exists()
    assert not (root / "elmo").exists() or os.listdir(root / "elmo") == [".elmo_export.lock"]


@pytest.mark.parametrize(
    "args, named",
    [
        (
            ["elmo-vocab", "in.txt", "in.txt"],
            ("cannot write in.txt: it is the corpus file in.txt",),
        ),
        (["elmo-vocab", "*.txt", "linked.txt"], ("linked.txt: it is the corpus file",)),
        (
            ["elmo-embed", "model.tar.gz", "in.txt", "in.txt"],
            ("in.txt: it is the input file in.txt",),
        ),
        (
            ["elmo-embed", "model.tar.gz", "in.txt", "model.tar.gz"],
            ("model.tar.gz: it is the model model.tar.gz",),
        ),
        (
            ["elmo-embed", "elmo", "in.txt", "elmo/out.hdf5"],
            ("elmo/out.hdf5: it is inside the model elmo",),
        ),
        (
            ["elmo-embed", "model.tar.gz", "in.txt", "o.hdf5", "--layers", "mix:o.hdf5"],
            ("o.hdf5: it is the mix archive o.hdf5",),
        ),
    ],
    ids=[
        "vocab-corpus",
        "vocab-hard-link",
        "embed-input",
        "embed-model",
        "embed-in-model-folder",
        "embed-mix",
    ],
)
def test_an_output_that_is_an_input_is_refused_naming_both_before_any_work(root, args, named):
    shutil.copy(BILM, root / "model.tar.gz")
    os.link(root / "in.txt", root / "linked.txt")
    (root / "elmo").mkdir()
    (root / "elmo" / "options.json").write_text("{}")
    (root / "o.hdf5").write_text("not a mix archive")
    before = {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
    result = run_allennlp(args, cwd=root, check=False)
    line = one_error_line(result)
    assert all(name in line for name in named), line
    assert "loading archive" not in result.stderr
    assert {path: path.read_bytes() for path in root.rglob("*") if path.is_file()} == before


def limited(args: list[str], root: Path, limit: int):
    """`allennlp ARGS` in a process whose files may not grow past `limit` bytes."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return run_forked(["-m", "tests.cli.file_size_limit", str(limit), *args], root, env)


@pytest.mark.parametrize(
    "args, limit, named",
    [
        (["elmo-vocab", "in.txt", "tokens.txt"], 40, "cannot write tokens.txt: the disk is full"),
        (["elmo-export", str(BILM), "elmo"], 500_000, "cannot write elmo/softmax.hdf5: the disk"),
    ],
    ids=["vocab", "export"],
)
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_partial_file(
    root, args, limit, named
):
    line = one_error_line(limited(args, root, limit))
    assert named in line, line
    left = {str(path.relative_to(root)) for path in root.rglob("*")}
    assert left <= {".allennlp_plugins", "in.txt", "elmo"}, left


def test_a_full_disk_stops_elmo_embed_with_a_whole_partial_file_that_resume_completes(root):
    """The room for each window is checked before HDF5 writes it: the first window is written,
    the second refused; `--resume` with room gives the uninterrupted run's file."""
    (root / "in.txt").write_bytes(TEXT * 50)
    args = ["elmo-embed", str(BILM), "in.txt", "out.hdf5", "--sort-window", "50"]
    line = one_error_line(limited(args, root, 1_300_000))
    assert "cannot write out.hdf5: the disk is full (out.hdf5.partial needs about" in line, line
    assert "out.hdf5.partial keeps the lines recorded as done, for --resume" in line, line
    assert sorted(os.listdir(root)) == [".allennlp_plugins", "in.txt", "out.hdf5.partial"]
    with h5py.File(root / "out.hdf5.partial", "r") as partial:
        assert partial.attrs["elmo_embed_lines_done"] > 0
    run_allennlp([*args, "--resume"], cwd=root)
    run_allennlp([*args[:3], "whole.hdf5", *args[4:]], cwd=root)
    resumed, whole = datasets(root / "out.hdf5"), datasets(root / "whole.hdf5")
    assert sorted(resumed) == sorted(whole)
    for name, value in whole.items():
        numpy.testing.assert_array_equal(resumed[name], value)


@pytest.fixture
def interrupted(root) -> Path:
    """`elmo-embed elmo in.txt out.hdf5` (an ELMo folder of the tiny biLM) stopped by a full disk
    after its first window: out.hdf5.partial holds 75 lines (50 sentences), recorded as done."""
    export_archive(str(BILM), str(root / "elmo"))
    (root / "in.txt").write_bytes(TEXT * 50)
    line = one_error_line(limited(["elmo-embed", *RESUMED], root, 1_300_000))
    assert "out.hdf5.partial keeps the lines recorded as done" in line, line
    return root


RESUMED = ["elmo", "in.txt", "out.hdf5", "--sort-window", "50"]


def other_weights(root: Path) -> str:
    shutil.copytree(root / "elmo", root / "other")
    with h5py.File(root / "other" / "weights.hdf5", "a") as weights:
        weights["CNN_proj/b_proj"][0] += 1.0  # same shapes, another model
    return "other"


def same_size_edit(root: Path, keep_time: bool) -> None:
    stat = (root / "in.txt").stat()
    (root / "in.txt").write_bytes(TEXT.replace(b"open", b"shut", 1) + TEXT * 49)
    if keep_time:
        os.utime(root / "in.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize(
    "change, named",
    [
        ("model", "written with the model (SHA-256 of its weights) '"),
        ("input-time", "written with an input modified at another time (ns) 1"),
        ("input-lines", "the first 75 lines of in.txt are not those out.hdf5.partial holds"),
        ("layers", "written with --layers 'all', this run has 'top'"),
    ],
    ids=["model", "input-time", "input-lines", "layers"],
)
def test_resume_refuses_another_model_input_or_option_naming_what_differs(
    interrupted, change, named
):
    args = [*RESUMED, "--resume"]
    if change == "model":
        args[0] = other_weights(interrupted)
    elif change == "layers":
        args += ["--layers", "top"]
    else:
        same_size_edit(interrupted, keep_time=change == "input-lines")
    partial = (interrupted / "out.hdf5.partial").read_bytes()
    line = one_error_line(run_allennlp(["elmo-embed", *args], cwd=interrupted, check=False))
    assert named in line and "without --resume to start over" in line, line
    assert not (interrupted / "out.hdf5").exists()
    if change != "input-lines":  # refused before the partial file is opened for writing
        assert (interrupted / "out.hdf5.partial").read_bytes() == partial


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / ".allennlp_plugins").write_text("elmo_plugin\n")
        count = int(sys.argv[1])
        print(
            f"{count} races clean, the runs overlapped (one refused) in {race(Path(folder), count)}"
        )


def test_on_a_file_system_without_flock_elmo_vocab_writes_its_output_whole_with_one_warning(
    root, monkeypatch
):
    """Lustre without its `flock` option, NFS without its lock daemon: flock fails (ENOLCK)."""

    def refused(descriptor, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output_file.fcntl, "flock", refused)
    monkeypatch.setattr(output_file, "WARNED_NO_FLOCK", set())
    result = run_allennlp_in_process(["elmo-vocab", "in.txt", "tokens.txt"], cwd=root)
    assert (root / "tokens.txt").read_text().split("\n")[:3] == ["<S>", "</S>", "@@UNKNOWN@@"]
    assert sorted(os.listdir(root)) == [".allennlp_plugins", "in.txt", "tokens.txt"]
    assert result.stderr.count("has no flock (No locks available)") == 1
