"""Every writer goes through one primitive (`elmo_plugin/data/output_file.py`), through the real
`allennlp` CLI: a symbolic or hard link planted at an output's lock or temporary name is never
followed (its target unchanged, the output no link), and two runs whose outputs are each other's
lock or partial file never both exit 0 with a lost or mixed output."""

import concurrent.futures
import os
import threading
import time
from pathlib import Path

import h5py
import pytest

from tests.helpers import REPO_ROOT, predict_args, run_allennlp

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
LINE = b"the file is open .\n"
VICTIM = b"a file outside the output's folder\n"

# command -> (its arguments, its output, the predictable names it once wrote through)
WRITERS = {
    "elmo-embed": (
        ["elmo-embed", str(BILM), "in.txt", "out.hdf5", "--layers", "top"],
        "out.hdf5",
        {"lock": ["out.hdf5.lock"], "temporary": ["out.hdf5.partial"]},
    ),
    "elmo-vocab": (
        ["elmo-vocab", "in.txt", "tokens.txt"],
        "tokens.txt",
        {"lock": ["tokens.txt.lock"], "temporary": ["tokens.txt.partial"]},
    ),
    "elmo-export": (
        ["elmo-export", str(BILM), "elmo"],
        "elmo/options.json",
        {
            "lock": ["elmo/.elmo_export.lock"],
            "temporary": [
                f"elmo/{name}.partial"
                for name in ("options.json", "weights.hdf5", "vocab.txt", "softmax.hdf5")
            ],
        },
    ),
    "predict": (
        [],  # predict_args
        "out.jsonl",
        {"lock": ["out.jsonl.lock"], "temporary": ["out.jsonl.partial"]},
    ),
}
CASES = [
    (command, names, kind)
    for command, (_, _, planted) in WRITERS.items()
    for names in planted
    for kind in ("symlink", "hardlink")
]


@pytest.fixture
def root(plugin_cwd) -> Path:
    (plugin_cwd / "in.txt").write_bytes(LINE * 3)
    (plugin_cwd / "elmo").mkdir()
    (plugin_cwd / "outside").mkdir()
    return plugin_cwd


def plant(root: Path, names: list[str], kind: str) -> list[Path]:
    """A file outside the output's folder per name, linked at that name; returns the files."""
    victims = []
    for number, name in enumerate(names):
        victim = root / "outside" / f"victim{number}"
        victim.write_bytes(VICTIM)
        (os.symlink if kind == "symlink" else os.link)(victim, root / name)
        victims.append(victim)
    return victims


def writer_args(command: str, root: Path) -> list[str]:
    if command == "predict":
        return predict_args(BILM, root, [{"sentence": "the file is open ."}], "elmo_embeddings")
    return WRITERS[command][0]


@pytest.mark.parametrize("command, names, kind", CASES)
def test_a_link_at_a_lock_or_temporary_name_is_never_followed(root, command, names, kind):
    args = writer_args(command, root)
    _, output, planted = WRITERS[command]
    victims = plant(root, planted[names], kind)
    result = run_allennlp(args, cwd=root, check=False)
    assert all(victim.read_bytes() == VICTIM for victim in victims)
    assert not (root / output).is_symlink()
    stderr = result.stdout + result.stderr
    if result.returncode == 0:  # the link ignored: the output written whole beside it
        assert (root / output).stat().st_size > 0
    else:  # refused in one line naming the link, which is left as it was
        errors = [line for line in stderr.splitlines() if ": error: " in line]
        assert result.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
        assert len(errors) == 1 and planted[names][0] in errors[0], stderr[-3000:]
        assert all(os.path.lexists(root / name) for name in planted[names])


def embed(input_file: str, output: str) -> list[str]:
    return ["elmo-embed", str(BILM), input_file, output, "--layers", "top"]


def wait_for(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def datasets(path: Path) -> list[str]:
    with h5py.File(path, "r") as vectors:
        return sorted(vectors)


@pytest.mark.parametrize("second_output", ["x.hdf5.lock", "x.hdf5.partial"])
def test_a_run_writing_another_runs_lock_or_partial_file_loses_no_output(root, second_output):
    """The first run reads a FIFO, its partial file open, while a second run writes that run's
    lock or partial file as its own output: each run that exits 0 leaves its whole output."""
    os.mkfifo(root / "in.fifo")
    (root / "small.txt").write_bytes(LINE * 20)
    fed, go_on = threading.Event(), threading.Event()

    def feed() -> None:  # the first 100 lines, then the rest once the second run ended
        with open(root / "in.fifo", "wb") as fifo:
            fifo.write(LINE * 100)
            fifo.flush()
            fed.set()
            go_on.wait(300)
            fifo.write(LINE * 700)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(run_allennlp, embed("in.fifo", "x.hdf5"), root, 600, False)
        fed.wait(300)
        wait_for(root / "x.hdf5.partial")
        second = run_allennlp(embed("small.txt", second_output), cwd=root, check=False)
        go_on.set()
        feeder.join(300)
        first_result = first.result()
    if second.returncode == 0:
        assert datasets(root / second_output) == sorted([*map(str, range(20)), "sentence_to_index"])
    else:
        assert "Traceback" not in second.stderr, second.stderr[-3000:]
    if first_result.returncode == 0:
        assert datasets(root / "x.hdf5") == sorted([*map(str, range(800)), "sentence_to_index"])
    assert first_result.returncode == 0 or second.returncode == 0
