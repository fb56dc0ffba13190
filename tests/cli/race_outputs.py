"""Races three writers of one output, with links planted at every name a writer might use near it:
`python -m tests.cli.race_outputs [REPETITIONS]` (default 20). Not collected by pytest.

For each repetition and each writer (`elmo-embed`'s HDF5, `elmo-vocab`'s tokens.txt, `elmo-export`'s
folder of four files, `allennlp predict --output-file` with `elmo_embeddings` or `elmo_lm_scorer`),
three processes of the same output are started at once (forks of the tests' warm server,
`tests.helpers.start_forked`), every other repetition with inputs of 20 and 80 lines (a mixed output
would show; `elmo-vocab`'s repeated 1000 times, so that its lock is held long enough for the writers
to overlap; `elmo-export` always exports the one tiny biLM). Before they start, links are planted (a
plan per repetition, in turn): symbolic or hard links at OUT itself, at `.OUT.*.partial`-looking
names, at OUT.partial (where it is not `elmo-embed`'s resumable state), at the lock's `.new`
temporary names; in some plans at the lock itself (OUT.lock, OUT_DIR/.elmo_export.lock) or at
`elmo-embed`'s OUT.partial, which must make every writer refuse; or a lock a killed run left (the
mark, a dead process id, no `flock`), which one writer takes over. Each link points at a "victim"
file outside the output folder, its content, inode and kind recorded.

Checked per race (one printed line per problem): every victim unchanged (same file, same content,
still a plain file); each writer that exited 0 left a complete, readable OUT equal to exactly one
writer's expected output (a reference run of its input alone: HDF5's datasets and
`sentence_to_index`, tokens.txt's text, the export's four files loadable and equal, predict's lines
all JSON and equal); each refusal a single `: error:` line, no traceback, nonzero exit, with a
message the plan expects (another run holds the lock; where a planted link blocks every writer, at
least one names the link, and the others may find the lock or the planted file `flock`ed by a writer
checking it: "being written by process PID" or, a planted file holding no process id, "by another
process", counted in the summary); no `.partial`, `.lock` or `.new` file left but planted links
(those kept are counted in the summary), nor a complete-looking output where no writer completed.
Prints `N repetitions x 4 writers: K problems` last and exits 1 when K > 0."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy

from elmo_plugin.data.output_file import LOCK_MARK
from tests.helpers import REPO_ROOT, allennlp_process, run_forked, start_forked

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
SIZES = {"small": 20, "large": 80}  # input lines
VOCAB_REPEATS = 1000  # elmo-vocab's inputs: the lines that many times
WRITERS_PER_RACE = 3
TIMEOUT_S = 600
LOCK_TAKEN = "is being written by process"
HELD_BY_ANOTHER = "is being written by another process"  # a lock file without a process id
REFUSED_LINK = (  # a link planted at the lock, or at elmo-embed's OUT.partial
    "is a symbolic link",
    "is not a lock of this package",
    "is not a plain file",
    "is not the partial file of an interrupted elmo-embed run",
    "is a link or another user's file, not this package's partial file",
)


@dataclass
class Writer:
    """One writer: its output (a path relative to the race's folder), the lock it takes, the
    names a writer might use near the output, and how it reads and compares its output."""

    name: str
    output: str
    lock: str
    args: Callable[[str, int], list[str]]  # (input kind, repetition) -> allennlp arguments
    read: Callable[[Path], Any]  # output -> comparable content (raises when unreadable)
    blocking: list[str]  # names whose planted link must make every writer refuse
    nearby: list[str]  # other names a writer might use near the output
    complete: str = ""  # the file whose presence means a complete output (default: `output`)
    mixed_inputs: bool = True  # whether repetitions may give its writers different inputs
    references: dict[tuple[str, str], Any] = field(default_factory=dict)

    def reference_key(self, kind: str, repetition: int) -> tuple[str, str]:
        return (kind, predictor(repetition) if self.name == "predict" else "")


def predictor(repetition: int) -> str:
    return "elmo_lm_scorer" if repetition % 4 in (2, 3) else "elmo_embeddings"


def file_names_near(output: str, partial_is_state: bool) -> tuple[list[str], list[str]]:
    """(blocking, nearby) names of a single-file output OUT."""
    lock = output + ".lock"
    blocking = [lock] + ([output + ".partial"] if partial_is_state else [])
    nearby = [
        output,
        f".{output}.planted1.partial",
        f".{output}.zzzzzzzz.partial",
        f".{lock}.planted1.new",
    ]
    if not partial_is_state:
        nearby.append(output + ".partial")
    return blocking, nearby


EXPORTED = ("options.json", "weights.hdf5", "vocab.txt", "softmax.hdf5")


def read_hdf5(path: Path) -> dict[str, numpy.ndarray]:
    with h5py.File(path, "r") as vectors:
        return {name: vectors[name][()] for name in vectors}


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def read_export(folder: Path) -> dict[str, Any]:
    """The four files, loaded (options.json present and JSON, the HDF5 files' datasets)."""
    found: dict[str, Any] = {"options.json": json.loads(read_text(folder / "options.json"))}
    found["vocab.txt"] = read_text(folder / "vocab.txt")
    for name in ("weights.hdf5", "softmax.hdf5"):
        arrays: dict[str, numpy.ndarray] = {}

        def keep(key: str, item: Any, arrays: dict = arrays) -> None:
            if isinstance(item, h5py.Dataset):
                arrays[key] = item[()]

        with h5py.File(folder / name, "r") as data:
            data.visititems(keep)
        found[name] = arrays
    return found


def read_predictions(path: Path) -> list[Any]:
    return [json.loads(line) for line in read_text(path).splitlines()]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, numpy.ndarray) or isinstance(b, numpy.ndarray):
        return bool(numpy.array_equal(a, b))
    return bool(a == b)


def writers(inputs: Path) -> list[Writer]:
    def text(kind: str) -> str:
        return str(inputs / f"{kind}.txt")

    def jsonl(kind: str) -> str:
        return str(inputs / f"{kind}.jsonl")

    def predict_args(kind: str, repetition: int) -> list[str]:
        args = ["predict", str(BILM), jsonl(kind), "--predictor", predictor(repetition)]
        args += ["--silent", "--output-file", "out.jsonl", "--batch-size", "4"]
        if predictor(repetition) == "elmo_embeddings":
            args += ["--predictor-args", json.dumps({"pool": "mean"})]
        return args

    embed_blocking, embed_nearby = file_names_near("out.hdf5", partial_is_state=True)
    vocab_blocking, vocab_nearby = file_names_near("tokens.txt", partial_is_state=False)
    predict_blocking, predict_nearby = file_names_near("out.jsonl", partial_is_state=False)
    lock = "elmo/.elmo_export.lock"
    export_nearby = [f"elmo/{name}" for name in EXPORTED]
    export_nearby += [f"elmo/.{name}.planted1.partial" for name in EXPORTED]
    export_nearby += ["elmo/..elmo_export.lock.planted1.new", "elmo.partial", "elmo.lock"]
    return [
        Writer(
            "elmo-embed",
            "out.hdf5",
            "out.hdf5.lock",
            lambda kind, _: ["elmo-embed", str(BILM), text(kind), "out.hdf5", "--layers", "top"],
            read_hdf5,
            embed_blocking,
            embed_nearby,
        ),
        Writer(
            "elmo-vocab",
            "tokens.txt",
            "tokens.txt.lock",
            lambda kind, _: ["elmo-vocab", str(inputs / f"{kind}.vocab.txt"), "tokens.txt"],
            read_text,
            vocab_blocking,
            vocab_nearby,
        ),
        Writer(
            "elmo-export",
            "elmo",
            lock,
            lambda kind, _: ["elmo-export", str(BILM), "elmo"],
            read_export,
            [lock],
            export_nearby,
            complete="elmo/options.json",
            mixed_inputs=False,
        ),
        Writer(
            "predict",
            "out.jsonl",
            "out.jsonl.lock",
            predict_args,
            read_predictions,
            predict_blocking,
            predict_nearby,
        ),
    ]


def plans(writer: Writer) -> list[tuple[str, dict[str, str]]]:
    """(plan name, {name near the output: "symlink" | "hardlink" | "stale lock"}) in turn."""
    symlinks = {name: "symlink" for name in writer.nearby}
    hardlinks = {name: "hardlink" for name in writer.nearby}
    found = [
        ("symlinks near OUT", symlinks),
        ("hard links near OUT", hardlinks),
        ("symlink at the lock", {**symlinks, writer.lock: "symlink"}),
        ("hard link at the lock", {**hardlinks, writer.lock: "hardlink"}),
        ("stale lock", {**symlinks, writer.lock: "stale lock"}),
    ]
    for name in writer.blocking:
        if name != writer.lock:  # elmo-embed's OUT.partial
            found.append(("symlink at OUT.partial", {**symlinks, name: "symlink"}))
            found.append(("hard link at OUT.partial", {**hardlinks, name: "hardlink"}))
    return found


@dataclass
class Victim:
    path: Path
    content: bytes
    inode: int


def plant(folder: Path, victims: Path, planned: dict[str, str]) -> dict[str, Victim]:
    """The planned links (and stale lock) in `folder`, each link's victim in `victims` ->
    {planted name: its victim} (a stale lock has none)."""
    planted = {}
    for number, (name, kind) in enumerate(sorted(planned.items())):
        path = folder / name
        path.parent.mkdir(exist_ok=True)
        if kind == "stale lock":
            path.write_text(f"{LOCK_MARK}{dead_process()}\n")
            continue
        victim = victims / f"{folder.name}.{number}.victim"
        # every third victim looks like a lock of this package: still never taken over
        content = (
            f"{LOCK_MARK}{os.getpid()}\n" if number % 3 == 0 else f"victim {victim.name}\n"
        ).encode()
        victim.write_bytes(content)
        if kind == "symlink":
            path.symlink_to(victim)
        else:
            os.link(victim, path)
        planted[name] = Victim(victim, content, victim.stat().st_ino)
    return planted


def dead_process() -> int:
    """The id of no running process."""
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def make_inputs(folder: Path) -> None:
    corpus = (REPO_ROOT / "fixtures/demo_corpus/train/shard_0.txt").read_text(encoding="utf-8")
    lines = [line for line in corpus.splitlines() if line.strip()]
    for kind, count in SIZES.items():
        chosen = ["" if i % 7 == 3 else lines[i % len(lines)] for i in range(count)]
        (folder / f"{kind}.txt").write_text("\n".join(chosen) + "\n", encoding="utf-8")
        # elmo-vocab counts 20 lines in milliseconds: repeated, its lock is held long enough for
        # the three writers to overlap (the same tokens as the lines once, other counts)
        repeated = "\n".join(chosen) + "\n"
        (folder / f"{kind}.vocab.txt").write_text(repeated * VOCAB_REPEATS, encoding="utf-8")
        sentences = [json.dumps({"sentence": line or "empty"}) for line in chosen]
        (folder / f"{kind}.jsonl").write_text("\n".join(sentences) + "\n", encoding="utf-8")


def reference(writer: Writer, kind: str, repetition: int, root: Path) -> Any:
    """The output of `writer` on input `kind` run alone (cached)."""
    key = writer.reference_key(kind, repetition)
    if key not in writer.references:
        folder = Path(tempfile.mkdtemp(prefix=f"reference_{writer.name}_", dir=root))
        (folder / ".allennlp_plugins").write_text("elmo_plugin\n")
        command, env = allennlp_process(writer.args(kind, repetition))
        result = run_forked(command, folder, env, TIMEOUT_S)
        if result.returncode != 0:
            raise SystemExit(
                f"reference run {' '.join(command)} failed ({result.returncode}):\n"
                f"{result.stderr[-3000:]}"
            )
        writer.references[key] = writer.read(folder / writer.output)
        shutil.rmtree(folder)
    return writer.references[key]


def refused_by_the_link(output: str) -> bool:
    """Whether a refusal names a planted link (at the lock, or elmo-embed's OUT.partial)."""
    errors = [line for line in output.splitlines() if ": error: " in line]
    return any(part in line for line in errors for part in REFUSED_LINK)


@dataclass
class Ended:
    kind: str
    returncode: int
    output: str


def start_race(writer: Writer, kinds: list[str], repetition: int, folder: Path) -> list[Ended]:
    """Three writers of the same output, started at once -> how each ended."""
    logs = folder.parent / f"{folder.name}.logs"
    logs.mkdir()
    started = []
    for number, kind in enumerate(kinds):
        command, env = allennlp_process(writer.args(kind, repetition))
        log = open(logs / f"{number}.log", "w+b")  # noqa: SIM115  (closed below)
        popen = dict(stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        started.append((kind, log, start_forked(command, folder, env, **popen)))
    ended = []
    for kind, log, process in started:
        try:
            returncode = process.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
        log.seek(0)
        ended.append(Ended(kind, returncode, log.read().decode(errors="replace")))
        log.close()
    shutil.rmtree(logs)
    return ended


def check_race(
    writer: Writer,
    plan: str,
    planted: dict[str, Victim],
    planned: dict[str, str],
    kinds: list[str],
    repetition: int,
    folder: Path,
    ended: list[Ended],
    root: Path,
    kept: Counter,
    overlapped: Counter,
) -> list[str]:
    """The problems of one race (one line each); `kept` counts the planted links left in place,
    `overlapped` the races where a writer was refused as another held the lock."""
    where = f"repetition {repetition} {writer.name} ({plan}, inputs {'/'.join(kinds)})"
    problems = []
    for name, victim in planted.items():
        try:
            found = os.lstat(victim.path)
            content = victim.path.read_bytes()
        except OSError as error:
            problems.append(f"{where}: victim of {name} lost: {error}")
            continue
        if not os.path.isfile(victim.path) or os.path.islink(victim.path):
            problems.append(f"{where}: victim of {name} is no longer a plain file")
        if found.st_ino != victim.inode:
            problems.append(f"{where}: victim of {name} was replaced (another inode)")
        if content != victim.content:
            problems.append(f"{where}: victim of {name} was written: {content[:80]!r}")
    blocked = any(
        name in writer.blocking and kind != "stale lock" for name, kind in planned.items()
    )
    succeeded = [run for run in ended if run.returncode == 0]
    for number, run in enumerate(ended):
        if run.returncode == 0:
            continue
        errors = [line for line in run.output.splitlines() if ": error: " in line]
        if run.returncode < 0 or "Traceback" in run.output or len(errors) != 1:
            problems.append(
                f"{where}: writer {number} exited {run.returncode} without one error line: "
                f"{' | '.join(run.output.strip().splitlines()[-3:])[-400:]}"
            )
            continue
        line = errors[0]
        # where a link blocks every writer, one may still find the lock, or the planted file,
        # flocked by another writer that checks it before it is refused: "being written by
        # process PID" or, the planted file holding no process id, "by another process"
        expected = LOCK_TAKEN in line or (blocked and refused_by_the_link(line))
        if blocked and HELD_BY_ANOTHER in line:
            expected = True
            overlapped[f"{writer.name}: {plan}: refused as {HELD_BY_ANOTHER!r}"] += 1
        if not expected:
            problems.append(f"{where}: writer {number} refused unexpectedly: {line[-400:]}")
    if blocked and succeeded:
        problems.append(f"{where}: {len(succeeded)} writer(s) wrote past a planted link")
    if blocked and not any(refused_by_the_link(run.output) for run in ended):
        problems.append(f"{where}: no writer named the planted link it was refused for")
    if not blocked and not succeeded:
        problems.append(f"{where}: no writer completed")
    output = folder / writer.output
    if succeeded:
        expected_outputs = {run.kind for run in succeeded}
        try:
            if output.is_symlink():
                raise ValueError("OUT is still a symbolic link")
            found = writer.read(output)
        except Exception as error:  # noqa: BLE001  (any failure to read is the problem)
            problems.append(f"{where}: the output is not readable: {error!r}"[:600])
        else:
            matches = [
                kind
                for kind in sorted(set(kinds))
                if same(found, reference(writer, kind, repetition, root))
            ]
            if not matches:
                problems.append(f"{where}: the output equals no writer's expected output")
            elif not set(matches) & expected_outputs:
                problems.append(f"{where}: the output is {matches}, which no successful run wrote")
    else:
        complete = writer.complete or writer.output
        if os.path.lexists(folder / complete) and complete not in planted:
            problems.append(f"{where}: {complete} exists though no writer completed")
    if any(LOCK_TAKEN in run.output for run in ended):
        overlapped[writer.name + (" (a planted link refused the others)" if blocked else "")] += 1
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if not name.endswith((".partial", ".lock", ".new")):
            continue
        if name in planted and path.is_symlink() == (planned[name] == "symlink"):
            if path.exists() and os.path.samefile(path, planted[name].path):
                kept[f"{writer.name}: {name} ({planned[name]})"] += 1
                continue
        problems.append(f"{where}: {name} left behind ({'link' if path.is_symlink() else 'file'})")
    return problems


def race(
    writer: Writer, repetition: int, root: Path, kept: Counter, overlapped: Counter
) -> list[str]:
    plan, planned = plans(writer)[repetition % len(plans(writer))]
    mixed = writer.mixed_inputs and repetition % 2 == 1
    kinds = ["small", "large", "small"] if mixed else ["small"] * WRITERS_PER_RACE
    if mixed and repetition % 4 == 3:
        kinds = ["large", "small", "large"]
    folder = root / f"race{repetition:03d}_{writer.name}"
    folder.mkdir()
    (folder / ".allennlp_plugins").write_text("elmo_plugin\n")
    victims = root / "victims"
    planted = plant(folder, victims, planned)
    for kind in set(kinds):  # the reference first, so the race's processes start together
        reference(writer, kind, repetition, root)
    ended = start_race(writer, kinds, repetition, folder)
    problems = check_race(
        writer, plan, planted, planned, kinds, repetition, folder, ended, root, kept, overlapped
    )
    shutil.rmtree(folder)
    for victim in planted.values():
        victim.path.unlink()
    return problems


def main(repetitions: int) -> int:
    started = time.monotonic()
    problems: list[str] = []
    kept: Counter = Counter()
    overlapped: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="race_outputs_") as folder:
        root = Path(folder)
        (root / "inputs").mkdir()
        (root / "victims").mkdir()
        make_inputs(root / "inputs")
        every = writers(root / "inputs")
        for repetition in range(repetitions):
            for writer in every:
                found = race(writer, repetition, root, kept, overlapped)
                for line in found:
                    print(line, flush=True)
                problems += found
            print(
                f"repetition {repetition}: {len(problems)} problems so far "
                f"({time.monotonic() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    for writer in every:
        names = [key for key in sorted(kept) if key.startswith(f"{writer.name}: ")]
        shown = ", ".join(f"{key.split(': ', 1)[1]} x{kept[key]}" for key in names)
        print(f"{writer.name}: planted links left as they were (refused or unused): {shown}")
    for name in sorted(overlapped):
        if HELD_BY_ANOTHER in name:
            print(f"{name}: {overlapped[name]} writers")
        else:
            count = overlapped[name]
            print(f"{name}: a writer refused while another held the lock in {count} races")
    print(f"{repetitions} repetitions x 4 writers: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
