"""What every benchmark shares: where the real data lives, and the one JSON line it ends with.

Every benchmark runs from the repo root as `python -m benchmarks.NAME [options]`. Its
`main(argv)` returns its figures (a dict); `run_benchmark(NAME, main)` prints the last line of
its output, one JSON object:

    {"name": NAME, "status": "ok", "headline": [KEY, ...], KEY: VALUE, ...}
    {"name": NAME, "status": "skipped", "reason": "real data not found: PATH (...)"}
    {"name": NAME, "status": "failed", "error": "ValueError: ..."}

`headline` names the figures a summary shows. A benchmark that measured but missed its own
target adds a `missed` figure saying which target. Exit status: 0 for ok and skipped, 1 for
failed and for a missed target. This module imports nothing heavy (no torch, no allennlp).
"""

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, Optional

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "training_config"
ALLENNLP = str(Path(sys.executable).parent / "allennlp")  # this environment's command
ALLENNLP_ENV = "ELMO_BENCHMARKS_ALLENNLP"  # another command for it: `allennlp_command`
STATUSES = ("ok", "skipped", "failed")
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}  # `--clock` choices


class Declaration(NamedTuple):
    """What each benchmark module declares beside its parser, as `DECLARATION`, and the one list
    `run_all`, tests/benchmarks and docs/benchmarks.md follow. `quick`: its options in `run_all`
    (None: `run_all` leaves it out, its docstring says why). `cheapest`: the options of its
    cheapest path, which the tests run (default: none), and `cheapest_status`, what that path
    ends with (default: skipped, as without the real data). `data`: the real-data files it
    reads (relative to `shared_data_dir()`), named in its skip line."""

    quick: Optional[list[str]]
    cheapest: Sequence[str] = ()
    cheapest_status: str = "skipped"
    data: tuple[Path, ...] = ()


def benchmark_parser(doc: Optional[str]) -> argparse.ArgumentParser:
    """A benchmark's parser: its module docstring as the help's description, as written."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def allennlp_command(*args: str, packages: Sequence[str] = ("elmo_plugin",)) -> list[str]:
    """`allennlp ARGS` with `--include-package P` for each of `packages` after them. The
    `allennlp` is this environment's (`ALLENNLP`), or the command $ELMO_BENCHMARKS_ALLENNLP names
    where it is set. The tests name their fork server's client (`forked_allennlp_script` of
    tests/helpers.py), whose commands are this environment's `allennlp` without its imports; a
    child's own figures (CPU seconds, peak RSS) are then the client's."""
    allennlp = os.environ.get(ALLENNLP_ENV) or ALLENNLP
    return [allennlp, *args, *(word for p in packages for word in ("--include-package", p))]


def benchmark_names() -> list[str]:
    """Every benchmark: the modules of benchmarks/ but `run_all`, sorted."""
    modules = (REPO_ROOT / "benchmarks").glob("*.py")
    return sorted(path.stem for path in modules if path.stem not in ("__init__", "run_all"))


def declaration(name: str) -> Declaration:
    """The `DECLARATION` of benchmarks/NAME.py (importing it)."""
    return importlib.import_module(f"benchmarks.{name}").DECLARATION


def shared_data_dir() -> Path:
    """Real corpora: $ELMO_PLUGIN_DATA, default ../shared/data beside the repo."""
    return Path(os.environ.get("ELMO_PLUGIN_DATA", REPO_ROOT.parent / "shared" / "data"))


def config_dict(config: Path) -> dict:
    """A training config (jsonnet) as a plain dict to edit."""
    from allennlp.common import Params

    return Params.from_file(str(config)).as_dict()


def scale_corpus_command(out: Path, tokens: int, shards: int, seed: int = 0) -> list[str]:
    """`scripts/make_scale_corpus.py`: `tokens` tokens of 1B Word's shape in `shards` files in
    `out`, its 793,471-line tokens.txt beside `out`."""
    script = str(REPO_ROOT / "scripts" / "make_scale_corpus.py")
    sizes = ["--tokens", str(tokens), "--shards", str(shards), "--seed", str(seed)]
    return [sys.executable, script, *sizes, "--out", str(out)]


def parse_as_command(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser` with `--keep-freed-heap` / `--no-keep-freed-heap` (default on, as `elmo-embed`
    and the shipped configs' `process_settings` have it) parses `argv`, and the process settings
    a command would apply (`ProcessSettings`) are applied: a benchmark measures what a user's
    command runs."""
    from elmo_plugin.training.process_settings import ProcessSettings

    parser.add_argument(
        "--keep-freed-heap",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep freed CPU memory in the process, as the commands do by default",
    )
    args = parser.parse_args(argv)
    ProcessSettings(keep_freed_heap=args.keep_freed_heap).apply()
    return args


# what a benchmark's training runs write and it reads once: checkpoints, archives, exported ELMo
# files (GBs each at the original's 793k-word softmax)
HEAVY_FILES = ("*.th", "*.tar.gz", "*.hdf5")


def remove_heavy_files(folder: Path) -> int:
    """Removes the `HEAVY_FILES` anywhere under `folder`, keeping logs, metrics and configs ->
    the bytes freed."""
    freed = 0
    for pattern in HEAVY_FILES:
        for path in folder.rglob(pattern):
            if path.is_file() and not path.is_symlink():
                freed += path.stat().st_size
                path.unlink()
    return freed


class Skip(Exception):
    """Ends a benchmark run by `run_benchmark` with status skipped; the message is the reason."""


def require_data(*paths: Path) -> None:
    """Returns when every path is a file; otherwise raises `Skip` naming the missing ones."""
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise Skip(
            f"real data not found: {', '.join(missing)} "
            "(set ELMO_PLUGIN_DATA to the shared data folder)"
        )


def result_line(name: str, status: str, **figures: Any) -> str:
    """The final line: one JSON object with `name` and `status` first."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r}: expected one of {STATUSES}")
    return json.dumps({"name": name, "status": status, **figures}, default=str)


def finish(name: str, status: str, **figures: Any) -> NoReturn:
    """Prints the final line and exits: 1 for failed or a `missed` figure, else 0."""
    print(result_line(name, status, **figures), flush=True)
    sys.exit(1 if status == "failed" or figures.get("missed") else 0)


def one_line(message: str, limit: int = 500) -> str:
    """The first non-empty line of `message`, at most `limit` characters."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return (lines[0] if lines else "")[:limit]


def run_benchmark(name: str, main: Callable[[list[str]], dict[str, Any]]) -> NoReturn:
    """`main(sys.argv[1:])`, then its final line: ok with the figures it returns; skipped on
    `Skip`; failed, the error in one line (the traceback on stderr), on any other exception or
    a non-zero `sys.exit` (an argparse error too). `--help` exits as usual."""
    try:
        figures = main(sys.argv[1:])
    except Skip as reason:
        finish(name, "skipped", reason=str(reason))
    except SystemExit as stop:
        if stop.code in (None, 0):
            raise
        if isinstance(stop.code, str):  # sys.exit("message")
            print(stop.code, file=sys.stderr, flush=True)
        error = one_line(stop.code) if isinstance(stop.code, str) else ""
        finish(name, "failed", error=error or f"exit status {stop.code} (see stderr)")
    except Exception as error:
        traceback.print_exc()
        sys.stderr.flush()
        message = one_line(str(error))
        kind = type(error).__name__
        finish(name, "failed", error=f"{kind}: {message}" if message else kind)
    finish(name, "ok", **figures)
