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
  generated 793,471-word `tokens.txt`), one epoch of the first `--train-tokens` tokens of a
  generated 1B Word-shaped corpus (scale_rehearsal's `make_corpus`), validated on
  `--heldout-tokens` tokens, with `elmo_validation_checks` every `--check-every` batches on
  `--check-batches` (a check's share of an epoch this short is far above the published configs'
  suggested 2000 on 20: it shows what a check costs, not what it costs at that interval).
For each case: `allennlp elmo-plan CONFIG -o OVERRIDES`, then `allennlp train CONFIG -o OVERRIDES`
(one epoch), then the same epoch without the checks. The real epoch is allennlp's "Epoch
duration" log line: the training batches, the checks, the validation at the epoch's end and the
epoch's checkpoint (what `elmo-plan` projects). Prints one JSON object per case, then one JSON
line (benchmarks/common.py): per case projected and real seconds and their ratio (goal: within
20%), and the epoch with checks over the epoch without (goal: below 1.05). Threads: the
environment's `OMP_NUM_THREADS` (1 if unset, as scale_rehearsal). `--tiny` shrinks everything
(the model, the corpora, the held-out text and the demo's check interval; minutes) for tests;
`--model-overrides` shrinks the model further in both cases.
"""

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks import scale_rehearsal as rehearsal
from benchmarks.common import CONFIG_DIR, REPO_ROOT, run_benchmark

NAME = "plan_vs_epoch"
DEMO_CONFIG = CONFIG_DIR / "elmo_lstm.jsonnet"
PLAN_GOAL = 0.2  # |projected / real - 1|
CHECKS_GOAL = 1.05  # epoch with checks / epoch without
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


def shipped(config: Path) -> dict:
    from allennlp.common import Params

    return Params.from_file(str(config)).as_dict()


def without_checks(config: Path) -> list[dict]:
    """The config's trainer callbacks but `elmo_validation_checks`."""
    return [
        c for c in shipped(config)["trainer"]["callbacks"] if c["type"] != "elmo_validation_checks"
    ]


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
        shipped(rehearsal.CONFIG)["trainer"]["checkpointer"]["save_every_num_batches"],
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


def plan(config: Path, values: dict) -> dict:
    command = [
        rehearsal.ALLENNLP,
        "elmo-plan",
        str(config),
        "-o",
        json.dumps(values),
        "--include-package",
        "elmo_plugin",
    ]
    result = rehearsal.run_measured(command, dry_run=False)
    rehearsal.check(result, "elmo-plan")
    return json.loads(result["output"].strip().splitlines()[-1])


def real_epoch(config: Path, run_dir: Path, values: dict) -> dict:
    """One epoch of `allennlp train`: its "Epoch duration" and allennlp's training_duration
    (training and validation) in seconds, and the number of checks it made."""
    shutil.rmtree(run_dir, ignore_errors=True)  # a run of an earlier benchmark
    result = rehearsal.run_measured(rehearsal.train_command(run_dir, values, config), dry_run=False)
    rehearsal.check(result, f"train {run_dir.name}")
    found = EPOCH_DURATION.findall(result["output"])
    if not found:
        sys.exit(f"plan_vs_epoch: no 'Epoch duration' line in the log of {run_dir}")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    checks = run_dir / "validation_checks.jsonl"
    return {
        "epoch_s": round(rehearsal.duration_seconds(found[-1]), 1),
        "training_duration_s": round(rehearsal.duration_seconds(metrics["training_duration"]), 1),
        "checks": len(checks.read_text().splitlines()) if checks.exists() else 0,
    }


def measure_case(name: str, config: Path, with_checks: dict, without: dict, work: Path) -> dict:
    projected = plan(config, with_checks)
    real = real_epoch(config, work / f"{name}_with_checks", with_checks)
    bare = real_epoch(config, work / f"{name}_without_checks", without)
    ratio = projected["epoch_seconds"] / real["epoch_s"]
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
        "epoch_without_checks_s": bare["epoch_s"],
        "with_over_without_checks": round(real["epoch_s"] / bare["epoch_s"], 3),
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
        else:
            config, (with_checks, without) = rehearsal.CONFIG, original_overrides(work, args)
        results.append(measure_case(name, config, with_checks, without, work))
        print(json.dumps(results[-1]), flush=True)
    figures: dict[str, Any] = {
        f"{r['case']}_{key}": r[key]
        for r in results
        for key in ("projected_over_real", "with_over_without_checks")
    }
    missed = [
        key
        for key, value in figures.items()
        if (key.endswith("projected_over_real") and abs(value - 1) > PLAN_GOAL)
        or (key.endswith("with_over_without_checks") and value >= CHECKS_GOAL)
    ]
    return {
        "headline": list(figures),
        **figures,
        "goals": {
            "projected_over_real": f"1 +- {PLAN_GOAL}",
            "with_over_without": f"< {CHECKS_GOAL}",
        },
        **({"missed": ", ".join(missed)} if missed else {}),
        "cases": results,
    }


if __name__ == "__main__":
    run_benchmark(NAME, main)
