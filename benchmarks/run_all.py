"""Every benchmark with quick settings, one after the other (`make benchmark`):

    python benchmarks/run_all.py [--timeout 300]

One line per benchmark as it finishes (its headline figure, or why it was skipped), then one
summary table. Quick settings trade precision for time (the whole run takes at most about 15
minutes on 2 CPU cores); docs/benchmarks.md gives each benchmark's full command. A benchmark whose
real data (`$ELMO_PLUGIN_DATA`, default ../shared/data) or GPU is missing is a skip line, not a
failure, and so is a benchmark that measured but missed its own target at these quick settings
("missed"); any other non-zero exit or a timeout makes this script exit 1.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple, Optional

REPO_ROOT = Path(__file__).resolve().parent.parent
OLD_BILM = (
    REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
)  # a tiny trained biLM


class Benchmark(NamedTuple):
    script: str
    quick_args: list[str]
    headline: str  # regex for the line(s) that carry the result
    needs_gpu: bool = False


BENCHMARKS = [
    Benchmark(
        "embedder_vs_allennlp_elmo.py",
        ["--max-tokens", "2000", "--original-tokens", "200"],
        r'"speedup"|"max_abs_diff"',
    ),
    Benchmark(
        "elmo_embed_vs_allennlp_elmo.py",
        ["--sentences", "1000", "--allennlp-sentences", "100"],
        r'"end_to_end_speedup"',
    ),
    Benchmark(
        "lstm_training_step.py",
        ["--rounds", "3", "--steps", "1"],
        r'"ours_clipped_of_matmul"|"clipped_vs_unclipped"',
    ),
    Benchmark(
        "lstm_vs_allennlp_models_transformer.py",
        ["--steps", "8", "--train-lines", "160"],
        r"^ratio",
    ),
    Benchmark(
        "transformer_vs_allennlp_models.py",
        [
            "--speed-steps",
            "2",
            "--speed-rounds",
            "1",
            "--quality-steps",
            "8",
            "--quality-seeds",
            "1",
        ],
        r"RATIO",
    ),
    Benchmark(
        "pos_tagger_elmo_vs_baseline.py",
        ["--bilm", str(OLD_BILM), "--tagger-epochs", "1"],
        r"ELMo - baseline",
    ),
    Benchmark("exact_resume.py", ["--tokens", "300_000"], r'"late_replay_over_ours"'),
    Benchmark(
        "sparse_softmax.py",
        ["--vocab-size", "60000", "--reference-vocab-size", "20000", "--steps", "1"],
        r'"dense_over_sparse_step"|"eval_unchunked_over_chunked_MB"',
    ),
    Benchmark(
        "data_pipeline.py",
        ["--tokens", "150000"],
        r'"(ours|theirs)_tokens_per_s_0_workers"|"ratio_ours',
    ),
    Benchmark("quality_table.py", ["--quick"], r'"targets"'),
    Benchmark(
        "gpu_original_elmo.py",
        ["--steps", "20", "--warmup", "5", "--precisions", "bf16"],
        r"tokens/s",
        True,
    ),
]
SKIP = re.compile(r"^(SKIP|skipped)\b", re.IGNORECASE | re.MULTILINE)


class Outcome(NamedTuple):
    name: str
    status: str
    seconds: float
    figure: str


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def run(benchmark: Benchmark, timeout: int, cuda: bool) -> Outcome:
    name = benchmark.script[:-3]
    if benchmark.needs_gpu and not cuda:
        return Outcome(
            name, "skip", 0.0, "no CUDA device here (runs on a GPU machine: scripts/gpu_run.sh)"
        )
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.setdefault("OMP_NUM_THREADS", "1")
    # `-m` from the repo root: this `benchmarks` package, not a dependency's top-level one
    command = [sys.executable, "-m", f"benchmarks.{name}", *benchmark.quick_args]
    start = time.perf_counter()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO_ROOT
        )
    except subprocess.TimeoutExpired:
        return Outcome(name, "TIMEOUT", time.perf_counter() - start, f"over {timeout} s")
    seconds = time.perf_counter() - start
    skipped = SKIP.search(result.stdout + result.stderr)
    if skipped:
        line = (result.stdout + result.stderr)[skipped.start() :].splitlines()[0]
        return Outcome(name, "skip", seconds, line)
    figure = headline(result.stdout, benchmark.headline)
    if result.returncode != 0 and figure:  # it measured, and says its target was missed
        return Outcome(name, "missed", seconds, figure)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return Outcome(name, "FAILED", seconds, f"exit {result.returncode}: {last[0][:150]}")
    return Outcome(name, "ok", seconds, figure or "(no headline line found)")


def headline(stdout: str, pattern: str) -> Optional[str]:
    lines = [line.strip() for line in stdout.splitlines() if re.search(pattern, line)]
    return " | ".join(lines)[:200] if lines else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timeout", type=int, default=300, help="seconds per benchmark")
    args = parser.parse_args()
    cuda = has_cuda()
    outcomes = []
    for benchmark in BENCHMARKS:
        outcome = run(benchmark, args.timeout, cuda)
        outcomes.append(outcome)
        print(
            f"{outcome.name}: {outcome.status} ({outcome.seconds:.0f} s) {outcome.figure}",
            flush=True,
        )
    width = max(len(o.name) for o in outcomes)
    print(f"\n{'benchmark':{width}}  {'status':7} {'seconds':>7}  figure")
    for o in outcomes:
        print(f"{o.name:{width}}  {o.status:7} {o.seconds:7.0f}  {o.figure}")
    sys.exit(1 if any(o.status in ("FAILED", "TIMEOUT") for o in outcomes) else 0)


if __name__ == "__main__":
    main()
