"""`allennlp elmo-plan`'s projected epoch against a real epoch of the same config, and what the
mid-epoch validation checks cost. Usage:

    python -m benchmarks.plan_vs_epoch [--cases demo original] [--train-tokens 100000]
        [--heldout-tokens 500] [--check-every 20] [--check-batches 1] [--workdir plan_vs_epoch]
        [--model-overrides JSON] [--tiny]

Cases:
- `demo`: `training_config/elmo_lstm.jsonnet` as shipped (its validation checks: every 50 batches
  on 5) on the bundled corpus, one epoch.
- `original`: `training_config/elmo_lstm_original.jsonnet` shrunk as `benchmarks.scale_rehearsal`
  shrinks it (its `train_overrides`: the LSTM at 2 x 1024/512, everything else at full size, the
  generated 793,471-word `tokens.txt`). One epoch of the first `--train-tokens` tokens of a
  generated 1B Word-shaped corpus (scale_rehearsal's `make_corpus`), validated on
  `--heldout-tokens` tokens. It has `elmo_validation_checks` every `--check-every` batches on
  `--check-batches` (far more often than the config's suggested every 2000 on 20: an epoch of
  2000 batches takes hours on a CPU).
For each case: `allennlp elmo-plan CONFIG -o OVERRIDES`, then `allennlp train CONFIG -o OVERRIDES`
(one epoch), then the same epoch without the checks. The real epoch is allennlp's "Epoch
duration" log line: the training batches, the checks, the validation at the epoch's end and the
epoch's checkpoint (what `elmo-plan` projects).

The checks' cost: each check logs its wall seconds (validation, its records and the best
weights written) and its validation's; their sum over the rest of the epoch is the share
measured at the run's interval. At the interval a user runs (the demo's own; the original's
suggested 2000 on 20) the share is `(seconds per validation batch x max_batches + a check's other
seconds) / (every_num_batches x seconds per training batch)`, from this run's checks and
elmo-plan's timed training steps. The epoch with checks over the epoch without is printed as a
cross-check (two separate epochs: a few percent of noise on a short one).

Prints one JSON object per case, then one JSON line (benchmarks/support/common.py): per case
projected and real seconds and their ratio (goal: within 20%) and the checks' share at the user's
interval (goal: below 5%). Threads: the environment's `OMP_NUM_THREADS` (1 if unset, as
scale_rehearsal). `--tiny` shrinks everything (the model, the corpora, the held-out text and the
demo's check interval; minutes) for tests; `--model-overrides` shrinks the model further in both
cases.
"""

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks import scale_rehearsal as rehearsal
from benchmarks.support.common import (
    CONFIG_DIR,
    REPO_ROOT,
    Declaration,
    allennlp_command,
    benchmark_parser,
    config_dict,
    run_benchmark,
)

NAME = "plan_vs_epoch"
DEMO_CONFIG = CONFIG_DIR / "elmo_lstm.jsonnet"
PLAN_GOAL = 0.2  # |projected / real - 1|
CHECKS_GOAL = 0.05  # the checks' seconds / the rest of the epoch, at the user's interval
# the interval elmo_lstm_original.jsonnet suggests (in a comment beside its callbacks)
SUGGESTED_ORIGINAL_CHECKS = {"every_num_batches": 2000, "max_batches": 20}
# --tiny: a model of seconds per epoch, a corpus of a few batches (the architecture kept)
TINY_MODEL = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 8], [2, 8], [3, 16]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
    "model.contextualizer.input_dim": 16,
    "model.contextualizer.cell_size": 32,
}
TINY_ORIGINAL = {"model.num_samples": 64, "data_loader.batch_size": 16}
TINY_DEMO_CHECKS = {"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 2}
EPOCH_DURATION = re.compile(r"Epoch duration: (\d+:\d\d:\d\d(?:\.\d+)?)")
# each check's wall seconds and its validation's
CHECK_SECONDS = re.compile(
    r"elmo_validation_checks: check at batch \d+: .* in (\d+\.\d+) s "
    r"\(validation (\d+\.\d+) s\)$",
    re.M,
)


def without_checks(config: Path) -> list[dict]:
    """The config's trainer callbacks but `elmo_validation_checks`."""
    callbacks = config_dict(config)["trainer"]["callbacks"]
    return [c for c in callbacks if c["type"] != "elmo_validation_checks"]


def demo_overrides(work: Path, args: argparse.Namespace) -> tuple[dict, dict]:
    """(with its checks, without) for one epoch of the demo config as shipped; with `--tiny` on
    the first lines of the bundled corpus, checked every 4 batches on 2."""
    values = {"trainer.num_epochs": 1, **args.model_overrides}
    bare = without_checks(DEMO_CONFIG)
    if args.tiny:
        values.update(tiny_demo_corpus(work))
        values["trainer.callbacks"] = [*bare, TINY_DEMO_CHECKS]
    return values, {**values, "trainer.callbacks": bare}


def tiny_demo_corpus(work: Path) -> dict:
    """The first lines of the bundled corpus' first shards, as train and validation paths."""
    corpus = REPO_ROOT / "fixtures" / "demo_corpus"
    paths = {}
    for key, source, lines in (
        ("train_data_path", corpus / "train" / "shard_0.txt", 300),
        ("validation_data_path", corpus / "valid" / "shard_0.txt", 60),
    ):
        path = work / "tiny_demo" / f"{key}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(source.read_text().splitlines(keepends=True)[:lines]))
        paths[key] = str(path)
    return paths


def original_overrides(work: Path, args: argparse.Namespace) -> tuple[dict, dict]:
    """(with checks, without) for one epoch of the shrunk original on a generated corpus."""
    rehearsal.make_corpus(work, args.train_tokens, 1, args.heldout_tokens, dry_run=False)
    values = rehearsal.train_overrides(
        rehearsal.training_subset(work, args.train_tokens, dry_run=False),
        rehearsal.heldout(work),
        work / "corpus" / "tokens.txt",
        1,
        args.cell_size,
        config_dict(rehearsal.CONFIG)["trainer"]["checkpointer"]["save_every_num_batches"],
        {**(TINY_ORIGINAL if args.tiny else {}), **args.model_overrides},
    )
    checks = {
        "type": "elmo_validation_checks",
        "every_num_batches": args.check_every,
        "max_batches": args.check_batches,
    }
    bare = without_checks(rehearsal.CONFIG)
    return (
        {**values, "trainer.callbacks": [*bare, checks]},
        {**values, "trainer.callbacks": bare},
    )


def plan(config: Path, values: dict, log: Path) -> dict:
    command = allennlp_command("elmo-plan", str(config), "-o", json.dumps(values))
    result = rehearsal.run_measured(command, log, dry_run=False)
    return json.loads(result["output"].strip().splitlines()[-1])


def real_epoch(config: Path, run_dir: Path, values: dict) -> dict:
    """One epoch of `allennlp train`: its "Epoch duration" and allennlp's training_duration
    (training and validation) in seconds, the number of checks it made and their seconds.
    RUN_DIR is removed once read (the original case's weights, checkpoints and archives take
    several GB per run), its log kept as RUN_DIR.log."""
    shutil.rmtree(run_dir, ignore_errors=True)  # a run of an earlier benchmark
    command = rehearsal.train_command(run_dir, values, config)
    result = rehearsal.run_measured(command, Path(f"{run_dir}.log"), dry_run=False)
    found = EPOCH_DURATION.findall(result["output"])
    if not found:
        sys.exit(f"plan_vs_epoch: no 'Epoch duration' line in the log of {run_dir}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    checks_seconds = CHECK_SECONDS.findall(result["output"])
    checks = run_dir / "validation_checks.jsonl"
    epoch = {
        "epoch_s": round(rehearsal.duration_seconds(found[-1]), 1),
        "training_duration_s": round(rehearsal.duration_seconds(metrics["training_duration"]), 1),
        "checks": len(checks.read_text().splitlines()) if checks.exists() else 0,
        "checks_s": round(sum(float(whole) for whole, _ in checks_seconds), 2),
        "checks_validation_s": round(sum(float(part) for _, part in checks_seconds), 2),
    }
    shutil.rmtree(run_dir)
    return epoch


def checks_settings(config: Path, values: dict) -> dict:
    """The `elmo_validation_checks` callback of the run: the overrides' or else the config's."""
    callbacks = values.get("trainer.callbacks") or config_dict(config)["trainer"]["callbacks"]
    return next(c for c in callbacks if c["type"] == "elmo_validation_checks")


def measure_case(
    name: str, config: Path, with_checks: dict, without: dict, work: Path, users: dict
) -> dict:
    """The projection against the real epoch, and the checks' share of the epoch: measured at
    the run's interval and projected to the `users` settings (`every_num_batches`,
    `max_batches`)."""
    projected = plan(config, with_checks, work / f"{name}_plan.log")
    real = real_epoch(config, work / f"{name}_with_checks", with_checks)
    bare = real_epoch(config, work / f"{name}_without_checks", without)
    ratio = projected["epoch_seconds"] / real["epoch_s"]
    run_checks = checks_settings(config, with_checks)
    if not real["checks"] or not run_checks.get("max_batches"):
        sys.exit(
            f"plan_vs_epoch: the {name} epoch made {real['checks']} validation checks with "
            f"max_batches {run_checks.get('max_batches')}: nothing to measure (lower "
            f"--check-every below its {projected['batches_per_epoch']} batches)"
        )
    # the share at the user's interval: the validation scales with max_batches, the rest of a
    # check (its records, the best weights written) does not
    per_check_batch_s = real["checks_validation_s"] / (real["checks"] * run_checks["max_batches"])
    per_check_rest_s = (real["checks_s"] - real["checks_validation_s"]) / real["checks"]
    at_users = (per_check_batch_s * users["max_batches"] + per_check_rest_s) / (
        users["every_num_batches"] * projected["seconds_per_batch"]
    )
    return {
        "case": name,
        "projected_epoch_s": round(projected["epoch_seconds"], 1),
        "projected_parts_s": {k: round(v, 1) for k, v in projected["epoch_parts"].items()},
        "projected_batches": projected["batches_per_epoch"],
        "batches_is_estimate": projected["batches_per_epoch_is_estimate"],
        "real_epoch_s": real["epoch_s"],
        "real_training_duration_s": real["training_duration_s"],
        "projected_over_real": round(ratio, 3),
        "checks_in_epoch": real["checks"],
        "checks_s": real["checks_s"],
        "checks_validation_s": real["checks_validation_s"],
        "checks_share": round(real["checks_s"] / (real["epoch_s"] - real["checks_s"]), 4),
        "training_batch_s": round(projected["seconds_per_batch"], 3),
        "users_checks": users,
        "checks_share_at_users_interval": round(at_users, 4),
        "epoch_without_checks_s": bare["epoch_s"],
        "with_over_without_checks": round(real["epoch_s"] / bare["epoch_s"], 3),
    }


DECLARATION = Declaration(
    quick=["--tiny"], cheapest=["--tiny", "--cases", "demo"], cheapest_status="ok"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--cases", nargs="+", choices=["demo", "original"], default=None)
    parser.add_argument("--train-tokens", type=int, default=100_000)
    parser.add_argument("--heldout-tokens", type=int, default=500)
    parser.add_argument("--cell-size", type=int, default=1024)
    parser.add_argument("--check-every", type=int, default=20)
    parser.add_argument("--check-batches", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "plan_vs_epoch")
    parser.add_argument("--model-overrides", type=json.loads, default={})
    parser.add_argument("--tiny", action="store_true", help="everything shrunk: minutes")
    args = parser.parse_args(argv)
    args.cases = args.cases or ["demo", "original"]
    if args.tiny:
        args.train_tokens, args.heldout_tokens, args.check_every = 3_000, 50, 4
        args.cell_size = TINY_MODEL["model.contextualizer.cell_size"]
        args.model_overrides = {**TINY_MODEL, **args.model_overrides}
    return args


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.cases:
        if name == "demo":
            config, (with_checks, without) = DEMO_CONFIG, demo_overrides(work, args)
            users = checks_settings(DEMO_CONFIG, with_checks)
        else:
            config, (with_checks, without) = rehearsal.CONFIG, original_overrides(work, args)
            users = SUGGESTED_ORIGINAL_CHECKS
        results.append(measure_case(name, config, with_checks, without, work, users))
        print(json.dumps(results[-1]), flush=True)
    figures: dict[str, Any] = {
        f"{r['case']}_{key}": r[key]
        for r in results
        for key in (
            "projected_over_real",
            "checks_share_at_users_interval",
            "with_over_without_checks",
        )
    }
    missed = [
        key
        for key, value in figures.items()
        if (key.endswith("projected_over_real") and abs(value - 1) > PLAN_GOAL)
        or (key.endswith("checks_share_at_users_interval") and value >= CHECKS_GOAL)
    ]
    return {
        "headline": list(figures),
        **figures,
        "goals": {
            "projected_over_real": f"1 +- {PLAN_GOAL}",
            "checks_share_at_users_interval": f"< {CHECKS_GOAL}",
        },
        **({"missed": ", ".join(missed)} if missed else {}),
        "cases": results,
    }


if __name__ == "__main__":
    run_benchmark(NAME, main)
