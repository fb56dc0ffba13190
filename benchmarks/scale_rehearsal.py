"""The 1B Word-shaped pretraining job, end to end on this machine, through the real CLI.

    python -m benchmarks.scale_rehearsal [--tokens 50000000] [--shards 100] [--train-tokens 500000]
        [--heldout-tokens 5000] [--workdir scale_rehearsal] [--processes [1 2]]

1. `scripts/make_scale_corpus.py`: `--tokens` in `--shards` shards with 1B Word's statistics,
   its 793,471-line `tokens.txt`, and a held-out shard (another seed).
2. `allennlp elmo-vocab --workers 2` over the whole corpus: seconds, tokens/s, peak RSS.
3. `allennlp train training_config/elmo_lstm_original.jsonnet` with that `tokens.txt`
   (`elmo_tokens_file`), the LSTM shrunk to 2 x `--cell-size`/512 (1024/512: the softmax stays
   512 wide). Everything else at full size: the 2048-filter character CNN, 8192 sampled
   negatives, batch 128 x 20, the sparse softmax, Adagrad, the `elmo_corpus` loader. One epoch of
   the first `--train-tokens` tokens of the corpus (500k: 263 steps), in 1 process and in 2
   CPU DDP processes (gloo), validated on the held-out text. Each run is `kill -9`ed as soon as its
   first mid-epoch checkpoint is complete (`save_every_num_batches`, about half an epoch),
   resumed with `-r`, and then evaluated with `allennlp evaluate` on the held-out text (the full
   softmax over 793k rows costs about 1.6 GFLOP per token: keep `--heldout-tokens` small on CPU).
4. The same epoch (1 process, no validation) with the full `tokens.txt` and with its first
   50,000 lines as the vocabulary: step time at 793k words / step time at 50k (goal <= 1.25).
   A bare `--processes` (no values) skips stage 3.
Peak RSS is the largest process's the script waited for (the main process; DDP workers report
theirs as metrics.json's `peak_worker_N_memory_MB`, in `metrics`).
Prints one JSON object per stage, then ends with the summary as one JSON line
(benchmarks/support/common.py; the summary also in WORKDIR/summary.json), each command's output
in WORKDIR/NAME.log (`corpus`, `elmo-vocab`, `train_1proc-killed`, ...).
`--model-overrides` (JSON) shrinks the model further (tests use it); `--dry-run` prints the
commands without running them.
"""

import argparse
import json
import os
import socket
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Optional

from benchmarks.support.child import POLL_S, Child
from benchmarks.support.common import (
    REPO_ROOT,
    Declaration,
    allennlp_command,
    benchmark_parser,
    run_benchmark,
    scale_corpus_command,
)

NAME = "scale_rehearsal"
CONFIG = REPO_ROOT / "training_config" / "elmo_lstm_original.jsonnet"
SMALL_VOCAB_LINES = 50_000


def run_measured(
    command: list[str], log: Path, dry_run: bool, kill_at_checkpoint: Optional[Path] = None
) -> dict:
    """Runs a command (`benchmarks/support/child.py`), returns its wall time, peak RSS and
    output; raises naming its log if it fails. With `kill_at_checkpoint` (a serialization
    dir), the whole process group is `kill -9`ed as soon as a mid-epoch checkpoint there is
    complete: `checkpoint` is its batch number, `save_s` its save time (to a poll) and
    `checkpoint_mib` its size."""
    print("$", " ".join(command), flush=True)
    result = dict(seconds=0.0, peak_rss_mib=0.0, output="", checkpoint=None, save_s=None)
    if dry_run:
        return result
    child = Child(command, log, {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    seen: dict[int, float] = {}  # batch -> when its model state file appeared
    while kill_at_checkpoint is not None and child.poll() is None:
        complete = complete_checkpoint(kill_at_checkpoint, seen)
        if complete is not None:
            result.update(
                checkpoint=complete,
                save_s=round(time.perf_counter() - seen[complete], 1),
                checkpoint_mib=checkpoint_mib(kill_at_checkpoint, complete),
            )
            child.kill()
            break
        time.sleep(POLL_S)
    if kill_at_checkpoint is None:
        child.check()
    result.update(
        seconds=round(child.wall_s, 1), peak_rss_mib=child.peak_rss_mib, output=child.output()
    )
    return result


def complete_checkpoint(run_dir: Path, seen: dict[int, float]) -> Optional[int]:
    """The batch number of a complete mid-epoch checkpoint of the first epoch in `run_dir` (its
    training state file, written last, ends with its zip directory), if any; notes in `seen`
    when each model state file first appeared."""
    for path in run_dir.glob("model_state_e0_b*.th"):
        seen.setdefault(int(path.stem.rsplit("_b", 1)[1]), time.perf_counter())
    for batch in sorted(seen):
        if batch > 0 and zipfile.is_zipfile(run_dir / f"training_state_e0_b{batch}.th"):
            return batch
    return None


def make_corpus(work: Path, tokens: int, shards: int, heldout_tokens: int, dry_run: bool) -> dict:
    train_shards = scale_corpus_command(work / "corpus" / "train", tokens, shards)
    train = run_measured(train_shards, work / "corpus.log", dry_run)
    heldout_shard = scale_corpus_command(work / "heldout" / "shards", heldout_tokens, 1, seed=1)
    run_measured(heldout_shard, work / "heldout.log", dry_run)
    return {"stage": "corpus", "tokens": tokens, "shards": shards, "seconds": train["seconds"]}


def count_vocabulary(work: Path, workers: int, dry_run: bool) -> dict:
    corpus, counted = str(work / "corpus" / "train" / "*"), str(work / "counted_tokens.txt")
    command = allennlp_command("elmo-vocab", corpus, counted, "--workers", str(workers))
    result = run_measured(command, work / "elmo-vocab.log", dry_run)
    last = result["output"].strip().splitlines()[-1:] or [""]
    return {
        "stage": "elmo-vocab",
        "workers": workers,
        "seconds": result["seconds"],
        "peak_rss_mib": result["peak_rss_mib"],
        "says": last[0],
    }


def training_subset(work: Path, train_tokens: int, dry_run: bool) -> Path:
    """The first lines of the corpus holding `train_tokens` tokens, as one shard file."""
    path = work / "train_subset" / "part-0.txt"
    if dry_run:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(path, "w", encoding="utf-8") as subset:
        for shard in sorted((work / "corpus" / "train").glob("*")):
            with open(shard, encoding="utf-8") as lines:
                for line in lines:
                    if written >= train_tokens:
                        return path
                    subset.write(line)
                    written += len(line.split())
    return path


def small_tokens_file(work: Path, dry_run: bool) -> Path:
    """The first SMALL_VOCAB_LINES lines of the generated tokens.txt (specials first)."""
    path = work / f"tokens_{SMALL_VOCAB_LINES}.txt"
    if not dry_run:
        with (
            open(work / "corpus" / "tokens.txt", encoding="utf-8") as full,
            open(path, "w", encoding="utf-8") as small,
        ):
            for _, line in zip(range(SMALL_VOCAB_LINES), full, strict=False):
                small.write(line)
    return path


def train_overrides(
    train_file: Path,
    validation: Optional[str],
    tokens_file: Path,
    processes: int,
    cell_size: int,
    save_every: int,
    extra: dict,
) -> dict:
    """`validation`: None for none (one process only: allennlp's distributed training reads the
    key whatever its value)."""
    values = {
        "train_data_path": str(train_file),
        "validation_data_path": validation,
        "vocabulary": {"type": "elmo_tokens_file", "tokens_file": str(tokens_file)},
        "model.contextualizer.cell_size": cell_size,
        "trainer.num_epochs": 1,
        "trainer.cuda_device": -1,
        "trainer.checkpointer.save_every_num_batches": save_every,
        **extra,
    }
    if processes > 1:
        values["distributed"] = {"cuda_devices": [-1] * processes, "master_port": free_port()}
    return values


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train_command(run_dir: Path, overrides: dict, config: Path = CONFIG) -> list[str]:
    """`allennlp train CONFIG -s RUN_DIR -o OVERRIDES` with the plugin."""
    return allennlp_command("train", str(config), "-s", str(run_dir), "-o", json.dumps(overrides))


def evaluate_command(work: Path, archive: Path, metrics: Path) -> list[str]:
    """`allennlp evaluate` of `archive` on the held-out text, on the CPU, into `metrics`."""
    where = ["--cuda-device", "-1", "--output-file", str(metrics)]
    return allennlp_command("evaluate", str(archive), heldout(work), *where)


def train_kill_resume_evaluate(work: Path, name: str, overrides: dict, dry_run: bool) -> dict:
    """train -> kill -9 once a mid-epoch checkpoint is complete -> train -r -> evaluate on the
    held-out text."""
    run_dir = work / name
    train = train_command(run_dir, overrides)
    killed = run_measured(train, work / f"{name}-killed.log", dry_run, kill_at_checkpoint=run_dir)
    if not dry_run and killed["checkpoint"] is None:
        sys.exit(
            f"scale_rehearsal: {name} ended before a mid-epoch checkpoint:\n"
            f"{killed['output'][-4000:]}"
        )
    resumed = run_measured([*train, "-r"], work / f"{name}-resumed.log", dry_run)
    evaluate = evaluate_command(work, run_dir / "model.tar.gz", run_dir / "heldout_metrics.json")
    evaluated = run_measured(evaluate, work / f"{name}-evaluate.log", dry_run)
    return {
        "stage": name,
        "killed_after_batch": killed["checkpoint"],
        "killed_after_s": killed["seconds"],
        "resume_s": resumed["seconds"],
        "peak_rss_mib": max(killed["peak_rss_mib"], resumed["peak_rss_mib"]),
        "checkpoint_mib": killed.get("checkpoint_mib"),
        "checkpoint_save_s": killed["save_s"],
        "heldout_perplexity": None
        if dry_run
        else json.loads((run_dir / "heldout_metrics.json").read_text())["perplexity"],
        "evaluate_s": evaluated["seconds"],
        "metrics": epoch_metrics(run_dir, dry_run),
    }


def checkpoint_mib(run_dir: Path, batch: int) -> float:
    """Size of the first epoch's checkpoint after `batch` batches (both files)."""
    files = [run_dir / f"{kind}_state_e0_b{batch}.th" for kind in ("model", "training")]
    return round(sum(path.stat().st_size for path in files if path.exists()) / 2**20, 1)


def epoch_metrics(run_dir: Path, dry_run: bool) -> dict:
    if dry_run:
        return {}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {
        key: value
        for key, value in metrics.items()
        if key in ("training_duration", "training_perplexity") or key.startswith("peak_")
    }


def heldout(work: Path) -> str:
    return str(work / "heldout" / "shards" / "*")


def epoch_seconds(work: Path, name: str, overrides: dict, dry_run: bool) -> float:
    """allennlp's training_duration of one uninterrupted epoch (no validation)."""
    run_dir = work / name
    run_measured(train_command(run_dir, overrides), work / f"{name}.log", dry_run)
    if dry_run:
        return 0.0
    return duration_seconds(json.loads((run_dir / "metrics.json").read_text())["training_duration"])


def duration_seconds(duration: str) -> float:
    """'H:MM:SS.ffffff' (allennlp's metrics.json) -> seconds."""
    hours, minutes, seconds = duration.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


DECLARATION = Declaration(quick=None, cheapest=["--dry-run", "--processes"], cheapest_status="ok")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument(
        "--train-tokens",
        type=int,
        default=500_000,
        help="train one epoch on the corpus' first N tokens",
    )
    parser.add_argument("--heldout-tokens", type=int, default=5_000)
    parser.add_argument(
        "--cell-size", type=int, default=1024, help="LSTM cells (more than the 512-wide projection)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        nargs="*",
        default=[1, 2],
        help="kill/resume runs with this many processes each; none (a bare --processes): "
        "only the corpus, elmo-vocab and the timing epochs",
    )
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "scale_rehearsal")
    parser.add_argument(
        "--model-overrides", type=json.loads, default={}, help="JSON overrides on top"
    )
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    work = args.workdir.resolve()
    stages = [make_corpus(work, args.tokens, args.shards, args.heldout_tokens, args.dry_run)]
    stages.append(count_vocabulary(work, 2, args.dry_run))
    print(json.dumps(stages[-1]), flush=True)
    train_file = training_subset(work, args.train_tokens, args.dry_run)
    # at most half an epoch: a batch holds at most batch_size windows of 20 tokens (+ </S>)
    batch_size = args.model_overrides.get("data_loader.batch_size", 128)
    save_every = max(args.train_tokens // (batch_size * 21) // 2, 1)
    full_vocab = work / "corpus" / "tokens.txt"
    for processes in args.processes:
        every = max(save_every // processes, 1)
        overrides = train_overrides(
            train_file,
            heldout(work),
            full_vocab,
            processes,
            args.cell_size,
            every,
            args.model_overrides,
        )
        stages.append(
            train_kill_resume_evaluate(work, f"train_{processes}proc", overrides, args.dry_run)
        )
        print(json.dumps(stages[-1]), flush=True)
    timings = {}
    for label, tokens_file in (
        ("793k", full_vocab),
        ("50k", small_tokens_file(work, args.dry_run)),
    ):
        overrides = train_overrides(
            train_file, None, tokens_file, 1, args.cell_size, 10**9, args.model_overrides
        )
        timings[label] = epoch_seconds(work, f"epoch_vocab_{label}", overrides, args.dry_run)
    ratio = timings["793k"] / timings["50k"] if timings["50k"] else None
    summary = {
        "stage": "summary",
        "epoch_seconds_793k": timings["793k"],
        "epoch_seconds_50k": timings["50k"],
        "step_time_ratio_793k_vs_50k": ratio,
        "goal": "<= 1.25",
        "stages": stages,
    }
    if not args.dry_run:
        (work / "summary.json").write_text(json.dumps(summary, indent=1))
    return {"headline": ["step_time_ratio_793k_vs_50k"], **summary}


if __name__ == "__main__":
    run_benchmark(NAME, main)
