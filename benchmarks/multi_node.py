"""Multi-node pretraining rehearsed on one machine: two network hosts (Linux network namespaces
with their own addresses), each running `allennlp train --node-rank R` with one CPU process
(gloo), checked against two processes on one host; then a node lost twice and the run resumed.

    python -m benchmarks.multi_node [--train-tokens 60000] [--cell-size 1024]
        [--timeout-seconds 60] [--stages one_host,two_hosts,kill,cut] [--workdir multi_node]
        [--keep]

A finished rehearsal removes its runs' checkpoints, archives and exported files (GBs at the
original's vocabulary), keeping logs, metrics and WORKDIR/summary.json; `--keep` keeps them.
Needs root and iproute2's `ip` (status skipped otherwise); the namespaces are removed on exit,
also on an error or Ctrl-C. `--hosts loopback` runs both nodes on this machine's 127.0.0.1
instead (no root; no cut stage). The config: `training_config/elmo_lstm_original.jsonnet` shrunk as
`benchmarks.scale_rehearsal` shrinks it (LSTM 2 x --cell-size/512; the 2048-filter character
CNN, 8192 sampled negatives, batch 128 x 20, sparse softmax, Adagrad, `elmo_corpus` loader and
mid-epoch checkpoints at full size). Its vocabulary: the first 50,000 words of the generated 1B
Word-shaped `tokens.txt`; one epoch of a generated corpus of --train-tokens
tokens, validated on a held-out shard. Every node gets a serialization folder of its own
(WORKDIR/STAGE/node0, node1), as on machines without shared storage.

1. one_host: one `allennlp train` with 2 processes over 127.0.0.1 (the reference).
2. two_hosts: node 0 and node 1 in their namespaces (primary address 10.231.0.1). Checks: each
   corpus window trained exactly once in the epoch across the nodes, batch for batch the
   reference's. The final weights (`best.th`) equal the reference's within 1e-6 (absolute); only
   node 0's folder has TensorBoard event files; both folders end with one complete
   `model.tar.gz` of the same weights; node 0's passes `allennlp evaluate` and `elmo-export`.
3. kill: once both nodes hold two complete mid-epoch checkpoints, node 1's processes get
   SIGKILL: the seconds until node 0 stops, and its line naming the lost peer. Then node 1's
   newest checkpoint is cut short (as if node 1 had died while saving it), and `-r` on both
   nodes must resume from the older one, the newest complete on every node, and train exactly
   the reference's remaining batches.
4. cut: once both nodes hold a complete mid-epoch checkpoint, node 1's link is taken down (a
   partition, no socket closed): the seconds until node 0 (and node 1) stop; link up, `-r` on
   both nodes resumes from the newest checkpoint and trains the reference's remaining batches.

Steps/s are measured from each process's batch times (`benchmarks/support/batch_record.py`),
startup and validation excluded. Ends with one JSON line (benchmarks/support/common.py), the
summary also in WORKDIR/summary.json; `--dry-run` prints the commands of stages 1-2 without running
them. A run still going after `--stage-timeout` seconds is stopped with SIGABRT first: the Python
stacks of each of its processes' threads (faulthandler) end its log, then the rehearsal fails
naming it.
"""

import argparse
import json
import os
import re
import signal
import sys
import time
import zipfile
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional, cast

from benchmarks.scale_rehearsal import (
    CONFIG,
    evaluate_command,
    free_port,
    heldout,
    make_corpus,
    small_tokens_file,
    train_command,
)
from benchmarks.support import network_hosts
from benchmarks.support.child import POLL_S, Child, wait
from benchmarks.support.common import (
    REPO_ROOT,
    Declaration,
    Skip,
    allennlp_command,
    benchmark_parser,
    config_dict,
    remove_heavy_files,
    run_benchmark,
)
from benchmarks.support.network_hosts import Host

NAME = "multi_node"
STAGES = ("one_host", "two_hosts", "kill", "cut")
PRIMARY_PORT = 29500  # inside node 0's namespace: nothing else listens there
WEIGHT_TOLERANCE = 1e-6  # absolute, on every weight
WATCHDOG_LINE = re.compile(r"elmo_peer_watchdog: .*")
RESUME_LINE = re.compile(
    r"elmo_checkpointer: resuming from the checkpoint after epoch (\d+) batch (\d+).*"
)


class Rehearsal:
    """The stages' shared settings and the processes they started (all killed at the end)."""

    def __init__(self, args: argparse.Namespace, work: Path, tokens_file: Path) -> None:
        self.args, self.work, self.tokens_file = args, work, tokens_file
        self.runs: list[Child] = []
        self.batches_per_epoch = max(args.train_tokens // (args.batch_size * 21) // 2, 4)
        self.save_every = max(self.batches_per_epoch // 4, 1)
        self.loopback_port = free_port()  # --hosts loopback: node 0's port on this machine

    def overrides(self, distributed: dict, record: Path) -> dict:
        callbacks = [
            *config_callbacks(),
            {"type": "batch_record", "folder": str(record)},
        ]
        watchdog = {
            "timeout_seconds": self.args.timeout_seconds,
            "interval_seconds": self.args.interval_seconds,
        }
        callbacks = [
            {**c, **watchdog} if c["type"] == "elmo_peer_watchdog" else c for c in callbacks
        ]
        return {
            "train_data_path": str(self.work / "corpus" / "train" / "*"),
            "validation_data_path": heldout(self.work),
            "vocabulary": {"type": "elmo_tokens_file", "tokens_file": str(self.tokens_file)},
            "model.contextualizer.cell_size": self.args.cell_size,
            "data_loader.batch_size": self.args.batch_size,
            "trainer.num_epochs": 1,
            "trainer.cuda_device": -1,
            "trainer.checkpointer.save_every_num_batches": self.save_every,
            "trainer.callbacks": callbacks,
            "distributed": distributed,
            **self.args.model_overrides,
        }

    def start(
        self,
        run_dir: Path,
        overrides: dict,
        log: Path,
        node_rank: Optional[int] = None,
        host: Optional[Host] = None,
        resume: bool = False,
    ) -> Child:
        command = train_command(run_dir, overrides)
        command += ["--include-package", "benchmarks.support.batch_record"]
        if node_rank is not None:
            command += ["--node-rank", str(node_rank)]
        if resume:
            command.append("-r")
        env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        if host is not None:
            env.update(host.environment())
            command = host.command(command)
        print("$", " ".join(command), flush=True)
        if self.args.dry_run:
            return None  # type: ignore[return-value]
        self.runs.append(Child(command, log, env))
        return self.runs[-1]

    def kill_all(self) -> None:
        for run in self.runs:
            run.kill()

    # --- the stages ---

    def one_host(self) -> dict:
        stage = self.work / "one_host"
        overrides = self.overrides(
            {"cuda_devices": [-1, -1], "primary_port": free_port()}, stage / "record"
        )
        run = self.start(stage / "run", overrides, stage / "train.log")
        if self.args.dry_run:
            return {"stage": "one_host"}
        wait([run], self.args.stage_timeout)
        run.check("one_host")
        return {
            "stage": "one_host",
            "steps_per_second": steps_per_second(stage / "record"),
            "peak_rss_mib": run.peak_rss_mib,
        }

    def two_node_overrides(self, record: Path, hosts: tuple[Host, Host]) -> dict:
        distributed = {
            "cuda_devices": [-1],
            "num_nodes": 2,
            "primary_address": hosts[0].address,
            "primary_port": PRIMARY_PORT if hosts[0].namespaced else self.loopback_port,
        }
        return self.overrides(distributed, record)

    def start_nodes(
        self, stage: Path, hosts: tuple[Host, Host], part: str, resume: bool = False
    ) -> list[Child]:
        # The same record folder for -r (allennlp refuses a changed config): `resume` moves the
        # killed run's records aside first.
        overrides = self.two_node_overrides(stage / "record", hosts)
        return [
            self.start(
                stage / f"node{rank}",
                overrides,
                stage / f"node{rank}-{part}.log",
                node_rank=rank,
                host=host,
                resume=resume,
            )
            for rank, host in enumerate(hosts)
        ]

    def two_hosts(self, hosts: tuple[Host, Host]) -> dict:
        stage = self.work / "two_hosts"
        runs = self.start_nodes(stage, hosts, "train")
        if self.args.dry_run:
            return {"stage": "two_hosts"}
        wait(runs, self.args.stage_timeout)
        for rank, run in enumerate(runs):
            run.check(f"two_hosts node {rank}")
        return {
            "stage": "two_hosts",
            "steps_per_second": steps_per_second(stage / "record"),
            "peak_rss_mib": [run.peak_rss_mib for run in runs],
            **check_two_hosts(self.work, stage),
        }

    def kill(self, hosts: tuple[Host, Host]) -> dict:
        stage = self.work / "kill"
        runs = self.start_nodes(stage, hosts, "killed")
        points = self.wait_for_checkpoints(runs, stage, 2)
        runs[1].send(signal.SIGKILL)
        stopped = self.time_to_stop(runs, stage)
        newest = points[-1]
        cut_short(stage / "node1" / f"training_state_e0_b{newest}.th")
        return {
            "stage": "kill",
            **stopped,
            **self.resume(stage, hosts, expected=points[-2], part="killed"),
        }

    def cut(self, hosts: tuple[Host, Host]) -> dict:
        stage = self.work / "cut"
        runs = self.start_nodes(stage, hosts, "cut")
        points = self.wait_for_checkpoints(runs, stage, 1)
        hosts[1].cut_link()
        try:
            stopped = self.time_to_stop(runs, stage)
        finally:
            hosts[1].restore_link()
        newest = max(common_checkpoints(stage), default=points[-1])
        return {
            "stage": "cut",
            **stopped,
            **self.resume(stage, hosts, expected=newest, part="cut"),
        }

    # --- fault helpers ---

    def wait_for_checkpoints(self, runs: list[Child], stage: Path, count: int) -> list[int]:
        """Waits until both nodes' folders hold `count` complete mid-epoch checkpoints."""
        deadline = time.time() + self.args.stage_timeout
        while len(points := common_checkpoints(stage)) < count:
            if any(run.poll() is not None for run in runs) or time.time() > deadline:
                self.kill_all()
                sys.exit(
                    f"multi_node: {stage.name}: no {count} complete checkpoints on both nodes "
                    f"before the run ended:\n{runs[0].output()[-3000:]}"
                )
            time.sleep(POLL_S)
        return points

    def time_to_stop(self, runs: list[Child], stage: Path) -> dict:
        """Seconds from the fault until each node's `allennlp train` ended, and node 0's line."""
        fault = time.perf_counter()
        limit = 3 * self.args.timeout_seconds + 120
        deadline = fault + limit
        while [run.poll() for run in runs].count(None) and time.perf_counter() < deadline:
            if runs[0].poll() is not None and time.perf_counter() > runs[0].ended + 60:  # type: ignore[operator]
                break  # node 1 is given a minute more
            time.sleep(POLL_S)
        stopped = {
            f"node{rank}_stopped_after_s": None
            if run.ended is None
            else round(run.ended - fault, 1)
            for rank, run in enumerate(runs)
        }
        self.kill_all()
        lines = WATCHDOG_LINE.findall(runs[0].output())
        if stopped["node0_stopped_after_s"] is None or not lines:
            sys.exit(
                f"multi_node: {stage.name}: node 0 did not stop with the watchdog's line within "
                f"{limit} s:\n{runs[0].output()[-3000:]}"
            )
        return {
            **stopped,
            "node0_says": lines[0],
            "node1_says": WATCHDOG_LINE.findall(runs[1].output())[:1],
        }

    def resume(self, stage: Path, hosts: tuple[Host, Host], expected: int, part: str) -> dict:
        """`-r` on both nodes: the checkpoint chosen (node 0's log), and the check that the killed
        run's batches up to it plus the resumed run's are the reference's."""
        (stage / "record").rename(stage / f"record-{part}")
        runs = self.start_nodes(stage, hosts, "resumed", resume=True)
        wait(runs, self.args.stage_timeout)
        for rank, run in enumerate(runs):
            run.check(f"{stage.name}: node {rank} -r")
        chosen = RESUME_LINE.search(runs[0].output())
        if chosen is None or int(chosen.group(2)) != expected:
            sys.exit(
                f"multi_node: {stage.name}: -r did not resume from batch {expected}:\n"
                f"{runs[0].output()[-3000:]}"
            )
        reference = read_records(self.work / "two_hosts" / "record")
        before = read_records(stage / f"record-{part}", up_to=expected)
        after = read_records(stage / "record")
        same = all(
            {**before[rank], **after[rank]} == reference[rank] for rank in reference
        ) and all(min(after[rank]) == expected + 1 for rank in after)
        if not same:
            sys.exit(
                f"multi_node: {stage.name}: the resumed epoch's batches differ from the reference's"
            )
        return {
            "resumed_from_batch": expected,
            "says": chosen.group(0),
            "resumed_batches_match": True,
        }


def config_callbacks() -> list[dict]:
    return config_dict(CONFIG)["trainer"]["callbacks"]


def complete(path: Path) -> bool:
    return path.is_file() and zipfile.is_zipfile(path)


def folder_checkpoints(folder: Path) -> set[int]:
    """Batches of the first epoch's complete mid-epoch checkpoints in one node's folder."""
    points = set()
    for path in folder.glob("model_state_e0_b*.th"):
        batch = int(path.stem.rsplit("_b", 1)[1])
        if batch and complete(path) and complete(folder / f"training_state_e0_b{batch}.th"):
            points.add(batch)
    return points


def common_checkpoints(stage: Path) -> list[int]:
    return sorted(folder_checkpoints(stage / "node0") & folder_checkpoints(stage / "node1"))


def cut_short(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def read_records(folder: Path, up_to: int = 10**9) -> dict[int, dict[int, list]]:
    """rank -> batch number -> rows, for the first epoch's batches up to `up_to`."""
    records: dict[int, dict[int, list]] = {}
    for path in sorted(folder.glob("rank*.jsonl")):
        rank = int(path.stem[4:])
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        records[rank] = {
            line["batch"]: line["rows"]
            for line in lines
            if line["epoch"] == 0 and line["batch"] <= up_to
        }
    return records


def steps_per_second(folder: Path) -> float:
    """Training steps per second of the slowest process, from first to last batch."""
    rates = []
    for path in folder.glob("rank*.jsonl"):
        times = [json.loads(line)["time"] for line in path.read_text().splitlines()]
        rates.append((len(times) - 1) / max(times[-1] - times[0], 1e-9))
    return round(min(rates), 4)


def corpus_windows(work: Path, vocabulary: Path) -> Counter:
    """The token ids of every instance the config's reader makes of the training corpus."""
    from allennlp.common import Params
    from allennlp.data import DatasetReader, Vocabulary
    from allennlp.data.fields import TextField

    import elmo_plugin  # noqa: F401  (registers the reader)

    reader = DatasetReader.from_params(Params.from_file(str(CONFIG)).pop("dataset_reader"))
    vocab = Vocabulary.from_files(str(vocabulary))
    return Counter(
        tuple(
            vocab.get_token_index(token.ensure_text(), "tokens")
            for token in cast(TextField, instance["source"]).tokens
        )
        for instance in reader.read(str(work / "corpus" / "train" / "*"))
    )


def max_weight_difference(first: Path, second: Path) -> float:
    import torch

    a, b = (torch.load(path, map_location="cpu") for path in (first, second))
    if a.keys() != b.keys():
        return float("inf")
    return max(float((a[name].float() - b[name].float()).abs().max()) for name in a)


def check_two_hosts(work: Path, stage: Path) -> dict:
    """The two-host run against the one-host reference and the folder layout."""
    reference = read_records(work / "one_host" / "record")
    records = read_records(stage / "record")
    trained = Counter(
        tuple(row) for batches in records.values() for rows in batches.values() for row in rows
    )
    checks: dict[str, Any] = {
        "each_window_once": trained == corpus_windows(work, stage / "node0" / "vocabulary"),
        "batches_equal_one_host": records == reference if reference else None,
        "max_weight_difference_vs_one_host": max_weight_difference(
            stage / "node0" / "best.th", work / "one_host" / "run" / "best.th"
        )
        if reference
        else None,
        "node_archives_equal": archived_weights_equal(stage / "node0", stage / "node1"),
        "tensorboard_event_files": {
            node: len(list((stage / node).glob("log/**/events.out.tfevents.*")))
            for node in ("node0", "node1")
        },
    }
    checks.update(evaluate_and_export(work, stage / "node0"))
    failed = [
        name
        for name, ok in (
            ("each_window_once", checks["each_window_once"]),
            ("batches_equal_one_host", checks["batches_equal_one_host"] is not False),
            (
                "weights",
                checks["max_weight_difference_vs_one_host"] is None
                or checks["max_weight_difference_vs_one_host"] <= WEIGHT_TOLERANCE,
            ),
            ("node_archives_equal", checks["node_archives_equal"]),
            (
                "tensorboard once",
                checks["tensorboard_event_files"]["node0"] > 0
                and checks["tensorboard_event_files"]["node1"] == 0,
            ),
        )
        if not ok
    ]
    if failed:
        sys.exit(f"multi_node: two_hosts: checks failed: {', '.join(failed)}: {json.dumps(checks)}")
    return checks


def archived_weights_equal(first: Path, second: Path) -> bool:
    import tarfile

    def weights(folder: Path) -> bytes:
        with tarfile.open(folder / "model.tar.gz") as archive:
            member = archive.extractfile("weights.th")
            assert member is not None
            return member.read()

    return weights(first) == weights(second)


def evaluate_and_export(work: Path, node0: Path) -> dict:
    archive = node0 / "model.tar.gz"
    metrics = node0.parent / "heldout_metrics.json"
    exported = node0.parent / "exported"
    for command in (
        evaluate_command(work, archive, metrics),
        allennlp_command("elmo-export", str(archive), str(exported)),
    ):
        Child(command, node0.parent / f"{command[1]}.log").check(" ".join(command[:2]))
    return {
        "heldout_perplexity": json.loads(metrics.read_text())["perplexity"],
        "exported": sorted(path.name for path in exported.iterdir()),
    }


DECLARATION = Declaration(quick=None, cheapest=["--dry-run"], cheapest_status="ok")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--train-tokens", type=int, default=60_000)
    parser.add_argument("--heldout-tokens", type=int, default=2_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--cell-size", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument(
        "--timeout-seconds", type=float, default=60.0, help="elmo_peer_watchdog's timeout_seconds"
    )
    parser.add_argument(
        "--interval-seconds", type=float, default=5.0, help="elmo_peer_watchdog's interval_seconds"
    )
    parser.add_argument(
        "--stages", default=",".join(STAGES), help="comma-separated, of " + ", ".join(STAGES)
    )
    parser.add_argument(
        "--stage-timeout", type=float, default=3600.0, help="seconds a run may take"
    )
    parser.add_argument("--workdir", type=Path, default=REPO_ROOT / "multi_node")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the runs' checkpoints, archives and exported files (GBs); by default a "
        "finished rehearsal keeps its logs, metrics and summary only",
    )
    parser.add_argument(
        "--model-overrides", type=json.loads, default={}, help="JSON overrides on top"
    )
    parser.add_argument(
        "--hosts",
        choices=("namespaces", "loopback"),
        default="namespaces",
        help="loopback: both nodes on this machine's 127.0.0.1 (no root; no cut stage)",
    )
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    args.stages = [stage for stage in args.stages.split(",") if stage]
    unknown = set(args.stages) - set(STAGES)
    if unknown:
        parser.error(f"--stages: unknown {', '.join(sorted(unknown))} (of {', '.join(STAGES)})")
    if {"kill", "cut"} & set(args.stages) and "two_hosts" not in args.stages:
        parser.error("--stages: kill and cut compare with two_hosts: name it too")
    if args.hosts == "loopback" and "cut" in args.stages:
        parser.error("--stages: cut needs --hosts namespaces (a loopback link cannot be cut)")
    return args


def main(argv: list[str]) -> dict[str, Any]:
    args = parse_args(argv)
    namespaced = args.hosts == "namespaces" and not args.dry_run
    reason = network_hosts.unavailable_reason()
    if namespaced and reason:
        raise Skip(reason)
    work = args.workdir.resolve()
    if not args.dry_run:
        make_corpus(work, args.train_tokens, args.shards, args.heldout_tokens, dry_run=False)
    rehearsal = Rehearsal(args, work, small_tokens_file(work, args.dry_run))
    stages: list[dict] = []
    signal.signal(signal.SIGTERM, network_hosts.interrupt)  # clean up as on Ctrl-C
    try:
        if "one_host" in args.stages:
            stages.append(rehearsal.one_host())
            print(json.dumps(stages[-1]), flush=True)
        if namespaced:
            context: Any = network_hosts.network_hosts()
        elif args.dry_run and args.hosts == "namespaces":
            context = nullcontext(dry_run_hosts())
        else:
            context = nullcontext(network_hosts.loopback_hosts())
        with context as hosts:
            try:  # the nodes' processes end before their namespaces go
                for name in ("two_hosts", "kill", "cut"):
                    if name in args.stages and not (args.dry_run and name != "two_hosts"):
                        stages.append(getattr(rehearsal, name)(hosts))
                        print(json.dumps(stages[-1]), flush=True)
            finally:
                rehearsal.kill_all()
    finally:
        rehearsal.kill_all()
    by_stage = {stage["stage"]: stage for stage in stages}
    summary: dict[str, Any] = {"stages": stages}
    if "one_host" in by_stage and "two_hosts" in by_stage and not args.dry_run:
        summary["steps_per_second_two_hosts_vs_one_host"] = round(
            by_stage["two_hosts"]["steps_per_second"] / by_stage["one_host"]["steps_per_second"], 3
        )
    for fault in ("kill", "cut"):
        if fault in by_stage:
            summary[f"node0_stopped_after_{fault}_s"] = by_stage[fault]["node0_stopped_after_s"]
    removed = {}
    if not args.dry_run:
        (work / "summary.json").write_text(json.dumps(summary, indent=1))
        if not args.keep:
            removed["removed_gb"] = round(remove_heavy_files(work) / 1e9, 2)
    headline = [key for key in summary if key != "stages"]
    return {
        "headline": headline,
        "timeout_seconds": args.timeout_seconds,
        "interval_seconds": args.interval_seconds,
        **summary,
        **removed,
    }


def dry_run_hosts() -> tuple[Host, Host]:
    return tuple(  # type: ignore[return-value]
        Host(f"elmo-node{node}-PID", f"elmo{node}-PID", f"{network_hosts.SUBNET}.{node + 1}")
        for node in range(2)
    )


if __name__ == "__main__":
    run_benchmark(NAME, main)
