"""benchmarks/multi_node.py at tiny sizes: two nodes train batch for batch and weight for weight
as two processes on one host, with one set of TensorBoard files and archives that evaluate and
export; a node killed or cut off stops the other within the watchdog's bound, and -r on both
nodes resumes from the newest checkpoint complete on both. The namespaced hosts and the cut link
need root and iproute2 (skipped elsewhere with the reason, where the nodes share the loopback);
the logic is tested without them in tests/training/test_peer_watchdog.py and
test_elmo_checkpointer.py. The rehearsal is a fresh process; its `allennlp` runs are forks of the
tests' warm server, each in its host's namespace (ELMO_BENCHMARKS_ALLENNLP)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.support import network_hosts
from benchmarks.support.common import HEAVY_FILES
from tests.helpers import REPO_ROOT, TINY_CHAR_CNN_OVERRIDES, warm_allennlp_env

REASON = network_hosts.unavailable_reason()
needs_namespaces = pytest.mark.skipif(REASON is not None, reason=f"multi-node: {REASON}")
TIMEOUT, INTERVAL = 6.0, 1.0  # the watchdog's, small for a quick test
SLACK = 30.0  # process exit and the parent's clean-up on a loaded machine
STAGE_TIMEOUT = 300.0  # a run (about 40 s alone); a hung one's stacks end its log


def run_logs(folder: Path) -> str:
    """The end of every run's log under FOLDER (a failed or hung run's last lines, stacks)."""
    return "".join(
        f"\n=== {log.relative_to(folder)} ===\n{log.read_text(errors='replace')[-6000:]}"
        for log in sorted(folder.rglob("*.log"))
    )


@pytest.mark.parametrize("hosts", ["namespaces", "loopback"])
@pytest.mark.slow
def test_two_nodes_train_as_one_host_and_recover_from_a_lost_node(hosts, tmp_path):
    """As root: two namespaced hosts, node 1 killed and later cut off. Elsewhere the same two
    `allennlp train --node-rank` on this machine's loopback, node 1 killed (no link to cut);
    exactly one of the two runs here, the other skips."""
    if hosts == "namespaces" and REASON is not None:
        pytest.skip(f"multi-node over network namespaces: {REASON}")
    if hosts == "loopback" and REASON is None:
        pytest.skip("root here: the namespaces run covers the loopback one")
    faults = ["kill", "cut"] if hosts == "namespaces" else ["kill"]
    tiny = {**TINY_CHAR_CNN_OVERRIDES, "model.num_samples": 64}
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    # its `allennlp` runs are forks of the warm server, each in its host's namespace
    # (tests/forked_allennlp.py); this process is a fresh one (its pid names them)
    env.update(warm_allennlp_env(tmp_path / "bin"))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.multi_node",
            *("--hosts", hosts, "--stages", ",".join(["one_host", "two_hosts", *faults])),
            *("--train-tokens", "9000", "--heldout-tokens", "300", "--shards", "2"),
            *("--cell-size", "32", "--batch-size", "16"),
            *("--timeout-seconds", str(TIMEOUT), "--interval-seconds", str(INTERVAL)),
            *("--stage-timeout", str(STAGE_TIMEOUT)),
            *("--workdir", str(tmp_path), "--model-overrides", json.dumps(tiny)),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stdout, stderr = process.communicate(timeout=900 + STAGE_TIMEOUT)  # a hang: its stage ends it
    assert process.returncode == 0, stdout[-3000:] + stderr[-3000:] + run_logs(tmp_path)
    if hosts == "namespaces":
        assert not [name for name in network_hosts.namespaces() if str(process.pid) in name]
    summary = json.loads((tmp_path / "summary.json").read_text())
    # logs and metrics kept, the runs' checkpoints, archives and exported files removed
    assert list(tmp_path.rglob("*.log")) and list(tmp_path.rglob("metrics*.json"))
    assert not [path for pattern in HEAVY_FILES for path in tmp_path.rglob(pattern)]
    stages = {stage["stage"]: stage for stage in summary["stages"]}
    two_hosts = stages["two_hosts"]
    assert two_hosts["each_window_once"] and two_hosts["batches_equal_one_host"]
    assert two_hosts["max_weight_difference_vs_one_host"] <= 1e-6
    assert two_hosts["tensorboard_event_files"]["node1"] == 0
    assert two_hosts["node_archives_equal"] and "weights.hdf5" in two_hosts["exported"]
    for fault in faults:
        stage = stages[fault]
        assert stage["node0_stopped_after_s"] <= TIMEOUT + 2 * INTERVAL + SLACK
        assert "lost rank 1 (node 1)" in stage["node0_says"]
        assert stage["resumed_batches_match"]
    assert stages["kill"]["says"].startswith(
        f"elmo_checkpointer: resuming from the checkpoint after epoch 0 batch "
        f"{stages['kill']['resumed_from_batch']}, the newest complete on every node (node 0: "
    )


@needs_namespaces
def test_the_hosts_are_removed_when_the_block_fails():
    with pytest.raises(RuntimeError, match="failed inside"):
        with network_hosts.network_hosts("t") as hosts:
            names = [host.name for host in hosts]
            assert set(names) <= set(network_hosts.namespaces())
            raise RuntimeError("failed inside")
    assert not set(names) & set(network_hosts.namespaces())


def test_without_root_or_ip_the_rehearsal_says_why_it_cannot_run(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert network_hosts.unavailable_reason() == "needs root to create network namespaces"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert network_hosts.unavailable_reason() == "needs iproute2's ip command (network namespaces)"
