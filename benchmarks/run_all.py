"""Every benchmark with quick settings, one after the other (`make benchmark`):

    python -m benchmarks.run_all [--timeout 300] [--logs run_all]

Runs each as `python -m benchmarks.NAME QUICK_OPTIONS`, its output in `--logs`/NAME.log, and
reads the last line of that log, the JSON line every benchmark ends with
(benchmarks/support/common.py). Prints one line per benchmark as it finishes (its headline
figures, or why it was skipped or failed), then a summary table, then its own JSON line: `name`
run_all, `status` ok or failed, and `benchmarks`, each benchmark's status. Quick settings trade
precision for time (seconds to a few minutes each on 2 CPU cores); docs/benchmarks.md gives each
benchmark's full command.

A benchmark whose real data (`$ELMO_PLUGIN_DATA`, default ../shared/data) or GPU is missing is
skipped, not failed, and so is one that measured but missed its own target at these quick
settings ("missed"). A failed benchmark, a timeout (the benchmark and every process it started
are stopped, their Python stacks at the end of its log) or a last line that is not a benchmark's
JSON line makes this script exit 1.

Runs every benchmark with quick options in its `DECLARATION` (benchmarks/support/common.py);
`scale_rehearsal` (the 1B Word-shaped job end to end: hours) and `multi_node` (two network
namespaces as root, up to an hour) declare none (tests/benchmarks runs both at tiny sizes).
`gpu_original_elmo` runs and skips itself where there is no CUDA device.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.support.child import Child, wait
from benchmarks.support.common import (
    REPO_ROOT,
    STATUSES,
    benchmark_names,
    benchmark_parser,
    declaration,
    finish,
)

NAME = "run_all"


class Benchmark(NamedTuple):
    name: str
    quick_args: list[str]


def quick_benchmarks() -> list[Benchmark]:
    """Every benchmark that declares quick options, with them (`Declaration.quick`), by name."""
    declared = ((name, declaration(name).quick) for name in benchmark_names())
    return [Benchmark(name, quick) for name, quick in declared if quick is not None]


class Outcome(NamedTuple):
    name: str
    status: str  # ok, missed, skipped or failed
    seconds: float
    figure: str  # headline figures, the skip reason or the error


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_outcome(name: str, returncode: int, output: str, seconds: float) -> Outcome:
    """A benchmark's outcome from its exit status and the last non-empty line of its output."""
    last = last_line(output)
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or result.get("status") not in STATUSES:
        return Outcome(
            name, "failed", seconds, f"exit {returncode}, last line not a result: {last[:80]!r}"
        )
    if result.get("name") != name:
        return Outcome(name, "failed", seconds, f"result line of {result.get('name')!r}")
    status = result["status"]
    if status == "skipped":
        return Outcome(name, status, seconds, str(result.get("reason", ""))[:200])
    if status == "failed":
        return Outcome(name, status, seconds, f"exit {returncode}: {result.get('error', '')}"[:200])
    figure = headline(result)
    if result.get("missed"):
        return Outcome(name, "missed", seconds, f"{figure}; missed {result['missed']}"[:200])
    if returncode != 0:
        return Outcome(name, "failed", seconds, f"exit {returncode} after an ok line: {figure}")
    return Outcome(name, "ok", seconds, figure)


def headline(result: dict[str, Any]) -> str:
    """`key=value` for each key the result's `headline` names."""
    keys = result.get("headline") or []
    return " ".join(f"{key}={json.dumps(result.get(key))}" for key in keys)[:200]


def run(benchmark: Benchmark, timeout: int, logs: Path) -> Outcome:
    # `-m` from the repo root: this `benchmarks` package, not a dependency's top-level one
    command = [sys.executable, "-m", f"benchmarks.{benchmark.name}", *benchmark.quick_args]
    threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    child = Child(command, logs / f"{benchmark.name}.log", threads)
    try:
        wait([child], timeout)
    except TimeoutError:
        return Outcome(benchmark.name, "failed", child.wall_s, f"over {timeout} s")
    returncode: int = child.returncode  # type: ignore[assignment]  # reaped by `wait`
    return read_outcome(benchmark.name, returncode, child.output(), child.wall_s)


def main(argv: list[str]) -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per benchmark")
    parser.add_argument("--logs", type=Path, default=REPO_ROOT / "run_all", help="folder")
    args = parser.parse_args(argv)
    print(f"logs: {args.logs.resolve()}", flush=True)
    outcomes = []
    for benchmark in quick_benchmarks():
        outcome = run(benchmark, args.timeout, args.logs)
        outcomes.append(outcome)
        print(
            f"{outcome.name}: {outcome.status} ({outcome.seconds:.0f} s) {outcome.figure}",
            flush=True,
        )
    width = max(len(o.name) for o in outcomes)
    print(f"\n{'benchmark':{width}}  {'status':7} {'seconds':>7}  figure")
    for o in outcomes:
        print(f"{o.name:{width}}  {o.status:7} {o.seconds:7.0f}  {o.figure}")
    failed = [o.name for o in outcomes if o.status == "failed"]
    finish(
        NAME,
        "failed" if failed else "ok",
        benchmarks={o.name: o.status for o in outcomes},
        **({"error": f"failed: {', '.join(failed)}"} if failed else {}),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
