"""bf16 training against float32 at demo size: does `model.mixed_precision: "bf16"` reach the
perplexity float32 reaches? The demo config (`--config`, default elmo_lstm.jsonnet as shipped:
4 epochs of the bundled corpus) is trained through `allennlp train`, --float32-seeds times in
float32 and --bf16-seeds times in bf16. Seed k sets allennlp's random, numpy and torch seeds to
k, so a seed's initial weights and batches are the same in both. Two runs go side by side, each
on one thread. A run's figure is its best validation perplexity on the bundled valid shard (the
shard `make demo` evaluates as held out). A bf16 run is within float32's seed spread when it lies
within float32's mean +- 2 sd. Usage:

    python -m benchmarks.bf16_vs_float32 [--out runs/bf16_vs_float32] [--float32-seeds 3]
        [--bf16-seeds 1] [--tiny]

On a CPU without native bf16 (AVX2 only) a bf16 run costs several float32 runs: the whole run
takes over an hour there (docs/benchmarks.md). Finished runs are kept in --out: the same command
continues an interrupted run. `--tiny` shrinks the model and the corpus (seconds per run, rough
numbers). Ends with one JSON line (benchmarks/support/common.py): each run's perplexity, epochs
and CPU seconds, float32's mean and sd, each bf16 run's distance from that mean in float32 sds,
`bf16_within_seed_spread`, and bf16 over float32 in mean perplexity and in CPU time.
"""

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.plan_vs_epoch import TINY_MODEL, tiny_demo_corpus
from benchmarks.support.child import Child
from benchmarks.support.common import (
    CONFIG_DIR,
    Declaration,
    allennlp_command,
    benchmark_parser,
    run_benchmark,
)
from benchmarks.support.stages import Result, Stage, run_stages

NAME = "bf16_vs_float32"
PRECISIONS = {"float32": {}, "bf16": {"model.mixed_precision": "bf16"}}
SPREAD_SDS = 2.0  # within float32's mean +- this many sds
BF16_COST = 10.0  # a bf16 run's cost in float32 runs (the longest stages start first)

DECLARATION = Declaration(
    quick=["--tiny"], cheapest=["--tiny", "--float32-seeds", "2"], cheapest_status="ok"
)


def train(config: Path, overrides: dict, folder: Path) -> Result:
    """`allennlp train CONFIG -o OVERRIDES` on one thread -> its best validation perplexity,
    epochs and CPU seconds."""
    command = allennlp_command(
        "train", str(config), "-s", str(folder / "run"), "-o", json.dumps(overrides)
    )
    one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    child = Child(command, folder / "train.log", one).check()
    metrics = json.loads((folder / "run" / "metrics.json").read_text())
    return {
        "perplexity": round(metrics["best_validation_perplexity"], 2),
        "epochs": metrics["epoch"] + 1,
        "cpu_s": round(child.cpu_s, 1),
    }


def run_stage(config: Path, precision: str, seed: int, base: dict, out: Path) -> Stage:
    name = f"{precision}_seed{seed}"
    seeds = {"random_seed": seed, "numpy_seed": seed, "pytorch_seed": seed}
    overrides = {**base, **seeds, **PRECISIONS[precision]}
    return Stage(
        name,
        lambda _: train(config, overrides, out / name),
        cost=BF16_COST if precision == "bf16" else 1.0,
        summary=lambda result: f"perplexity {result['perplexity']}",
    )


def compare(results: dict[str, Result], float32_seeds: int, bf16_seeds: int) -> dict[str, Any]:
    """The figures: float32's mean and sd over its seeds, each bf16 run against them."""
    float32 = [results[f"float32_seed{seed}"]["perplexity"] for seed in range(float32_seeds)]
    bf16 = [results[f"bf16_seed{seed}"]["perplexity"] for seed in range(bf16_seeds)]
    mean, sd = statistics.mean(float32), statistics.stdev(float32)
    sds = [round((value - mean) / sd, 2) if sd else None for value in bf16]
    cpu = {
        precision: statistics.mean(
            result["cpu_s"] for name, result in results.items() if name.startswith(precision)
        )
        for precision in PRECISIONS
    }
    return {
        "float32_perplexity_mean": round(mean, 2),
        "float32_perplexity_sd": round(sd, 2),
        "bf16_perplexity": bf16,
        "bf16_sds_from_float32_mean": sds,
        "bf16_within_seed_spread": all(abs(value - mean) <= SPREAD_SDS * sd for value in bf16),
        "bf16_over_float32_perplexity": round(statistics.mean(bf16) / mean, 3),
        "bf16_over_float32_cpu_time": round(cpu["bf16"] / cpu["float32"], 2),
    }


def main(argv: list[str]) -> dict[str, Any]:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--config", default=str(CONFIG_DIR / "elmo_lstm.jsonnet"))
    parser.add_argument("--float32-seeds", type=int, default=3)
    parser.add_argument("--bf16-seeds", type=int, default=1)
    parser.add_argument(
        "--out", help="folder for the runs (a rerun continues there; default: a new temporary one)"
    )
    parser.add_argument("--workers", type=int, default=2, help="runs side by side")
    parser.add_argument("--tiny", action="store_true", help="the model and the corpus shrunk")
    args = parser.parse_args(argv)
    if args.float32_seeds < 2 or args.bf16_seeds < 1 or args.workers < 1:
        parser.error("--float32-seeds must be at least 2, --bf16-seeds and --workers at least 1")
    out = Path(args.out or tempfile.mkdtemp(prefix=f"{NAME}_")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"runs and logs: {out}", flush=True)
    base = {**TINY_MODEL, **tiny_demo_corpus(out)} if args.tiny else {}
    config = Path(args.config)
    stages = [
        run_stage(config, precision, seed, base, out)
        for precision, count in (("float32", args.float32_seeds), ("bf16", args.bf16_seeds))
        for seed in range(count)
    ]
    results = run_stages(stages, out / "stages", args.workers)
    figures = compare(results, args.float32_seeds, args.bf16_seeds)
    for name, result in results.items():
        print(f"{name}: perplexity {result['perplexity']}, {result['cpu_s'] / 60:.1f} CPU min")
    print(
        f"float32 {figures['float32_perplexity_mean']} +- {figures['float32_perplexity_sd']}; "
        f"bf16 {figures['bf16_perplexity']} ({figures['bf16_sds_from_float32_mean']} sds): "
        f"{'within' if figures['bf16_within_seed_spread'] else 'outside'} float32's seed spread"
    )
    summary: dict[str, Any] = {
        "headline": ["bf16_within_seed_spread", "bf16_over_float32_perplexity"],
        **figures,
        "runs": results,
        "config": str(config),
        "tiny": args.tiny,
        "out": str(out),
    }
    if not figures["bf16_within_seed_spread"] and not args.tiny:
        summary["missed"] = f"bf16 within float32's mean +- {SPREAD_SDS:g} sd"
    return summary


if __name__ == "__main__":
    run_benchmark(NAME, main)
