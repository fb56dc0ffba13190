"""bf16 training against float32 at demo size: does `model.mixed_precision: "bf16"` reach the
perplexity float32 reaches? A config (`--config`, default the demo's elmo_lstm.jsonnet as
shipped: 4 epochs of the bundled corpus) is trained through `allennlp train`, --float32-seeds
times in float32 and --bf16-seeds times in bf16. Seed k sets allennlp's random, numpy and torch
seeds to k, so a seed's initial weights and batches are the same in both. --workers runs go side
by side, each on one thread. A run's figure is its best validation perplexity (the demo config
validates on the bundled valid shard). A bf16 run is within float32's seed spread when it lies
within float32's mean +- 2 sd. Usage:

    python -m benchmarks.bf16_vs_float32 [--out runs/bf16] [--config CONFIG]
        [--float32-seeds 3] [--bf16-seeds 1] [--workers 2] [--tiny]

On a CPU without native bf16 (AVX2 only) a bf16 run costs several float32 runs: the whole run
takes over an hour there (docs/benchmarks.md). Finished runs are kept in --out: the same command
continues an interrupted run (more seeds extend it; another config or --tiny is refused). `--tiny`
shrinks the model and the corpus (seconds per run, rough numbers). Ends with one JSON line
(benchmarks/support/common.py): each run's perplexity, epochs and CPU seconds, float32's mean and
sd, each bf16 run's distance from that mean in float32 sds and from float32's run of its seed,
`bf16_within_seed_spread`, and bf16 over float32 in mean perplexity and in CPU time.
"""

import json
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.plan_vs_epoch import TINY_MODEL, tiny_demo_corpus
from benchmarks.support.child import one_thread
from benchmarks.support.common import (
    CONFIG_DIR,
    Declaration,
    allennlp_command,
    benchmark_parser,
    run_benchmark,
)
from benchmarks.support.stages import Result, Stage, keep_settings, run_stages

NAME = "bf16_vs_float32"
PRECISIONS = {"float32": {}, "bf16": {"model.mixed_precision": "bf16"}}
SPREAD_SDS = 2.0  # within float32's mean +- this many sds
# a demo run's CPU seconds on a 2-core AVX2 machine (the longest stages start first)
COST_S = {"float32": 600.0, "bf16": 3700.0}

DECLARATION = Declaration(
    quick=["--tiny"], cheapest=["--tiny", "--float32-seeds", "2"], cheapest_status="ok"
)


def train(config: Path, overrides: dict, folder: Path) -> Result:
    """`allennlp train CONFIG -o OVERRIDES` on one thread -> its best validation perplexity,
    epochs and CPU seconds."""
    command = allennlp_command(
        "train", str(config), "-s", str(folder / "run"), "-o", json.dumps(overrides)
    )
    if (folder / "run").exists():  # left by a run that stopped before this stage finished
        shutil.rmtree(folder / "run")
    cost = one_thread(command, folder / "train.log")
    metrics = json.loads((folder / "run" / "metrics.json").read_text())
    return {
        "perplexity": round(metrics["best_validation_perplexity"], 2),
        "epochs": metrics["epoch"] + 1,
        "cpu_s": cost["cpu_s"],
    }


def run_stage(config: Path, precision: str, seed: int, base: dict, out: Path) -> Stage:
    name = f"{precision}_seed{seed}"
    seeds = {"random_seed": seed, "numpy_seed": seed, "pytorch_seed": seed}
    overrides = {**base, **seeds, **PRECISIONS[precision]}
    return Stage(
        name,
        lambda _: train(config, overrides, out / name),
        cost=COST_S[precision],
        summary=lambda result: f"perplexity {result['perplexity']}",
    )


def compare(results: dict[str, Result], float32_seeds: int, bf16_seeds: int) -> dict[str, Any]:
    """float32's perplexity mean and sd over its seeds; per bf16 run its perplexity, its distance
    from that mean in sds and its difference from float32's run of the same seed; whether every
    bf16 run is within the spread; bf16 over float32 in mean perplexity and mean CPU seconds."""
    runs = {
        "float32": [results[f"float32_seed{seed}"] for seed in range(float32_seeds)],
        "bf16": [results[f"bf16_seed{seed}"] for seed in range(bf16_seeds)],
    }
    float32 = [run["perplexity"] for run in runs["float32"]]
    bf16 = [run["perplexity"] for run in runs["bf16"]]
    mean, sd = statistics.mean(float32), statistics.stdev(float32)
    cpu = {name: statistics.mean(run["cpu_s"] for run in group) for name, group in runs.items()}
    return {
        "float32_perplexity_mean": round(mean, 2),
        "float32_perplexity_sd": round(sd, 2),
        "bf16_perplexity": bf16,
        "bf16_sds_from_float32_mean": [
            round((value - mean) / sd, 2) if sd else None for value in bf16
        ],
        "bf16_minus_float32_same_seed": [
            round(value - float32[seed], 2) if seed < float32_seeds else None
            for seed, value in enumerate(bf16)
        ],
        "bf16_within_seed_spread": all(abs(value - mean) <= SPREAD_SDS * sd for value in bf16),
        "bf16_over_float32_perplexity": round(statistics.mean(bf16) / mean, 3),
        # None where no CPU time was measured (children through the tests' fork server)
        "bf16_over_float32_cpu_time": (
            round(cpu["bf16"] / cpu["float32"], 2) if cpu["float32"] else None
        ),
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
    config = Path(args.config).resolve()
    keep_settings(out, {"config": str(config), "tiny": args.tiny})
    base = {**TINY_MODEL, **tiny_demo_corpus(out)} if args.tiny else {}
    stages = [
        run_stage(config, precision, seed, base, out)
        for precision, count in (("float32", args.float32_seeds), ("bf16", args.bf16_seeds))
        for seed in range(count)
    ]
    results = run_stages(stages, out / "stages", args.workers)
    figures = compare(results, args.float32_seeds, args.bf16_seeds)
    for name, result in results.items():
        print(f"{name}: perplexity {result['perplexity']}, {result['cpu_s'] / 60:.1f} CPU min")
    bf16 = ", ".join(
        f"{value} ({sds} sds" + ("" if same is None else f", {same:+} on float32's run") + ")"
        for value, sds, same in zip(
            figures["bf16_perplexity"],
            figures["bf16_sds_from_float32_mean"],
            figures["bf16_minus_float32_same_seed"],
            strict=True,
        )
    )
    spread = "within" if figures["bf16_within_seed_spread"] else "outside"
    print(
        f"float32 {figures['float32_perplexity_mean']} +- {figures['float32_perplexity_sd']}; "
        f"bf16 {bf16}: {spread} float32's mean +- {SPREAD_SDS:g} sd"
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
