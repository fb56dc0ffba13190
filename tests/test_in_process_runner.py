"""`run_allennlp_in_process` (tests/helpers.py) runs a command as an `allennlp` process would:
the same output files and exit status as `run_allennlp` (a process), and it leaves this process
as it was. A fresh process (`run_forked(..., fresh=True)`, what runs where the warm server
cannot fork: a GPU machine) gives what a fork gives, and a fork killed through its client is gone
with what it started, as a killed process would be."""

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy
import pytest
import torch

from benchmarks.support import network_hosts
from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    forked_client,
    overrides,
    run_allennlp,
    run_allennlp_in_process,
    run_forked,
    running,
    start_forked,
)

OLD_BILM_ARCHIVE = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"


def test_evaluate_in_process_writes_what_the_process_writes(tiny_corpus, tmp_path):
    args = ["evaluate", str(OLD_BILM_ARCHIVE), str(tiny_corpus / "valid.txt"), "--output-file"]
    in_process = run_allennlp_in_process([*args, str(tmp_path / "in_process.json")])
    run_allennlp([*args, str(tmp_path / "process.json")])
    metrics = [
        json.loads((tmp_path / f"{name}.json").read_text()) for name in ("in_process", "process")
    ]
    assert metrics[0] == metrics[1] and "perplexity" in metrics[0]
    assert "allennlp.commands.evaluate - Finished evaluating." in in_process.stderr


def test_a_user_error_is_its_one_line_and_exit_status_1(tmp_path):
    result = run_allennlp_in_process(
        ["elmo-embed", str(OLD_BILM_ARCHIVE), "nope.txt", "out.hdf5"], cwd=tmp_path, check=False
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "allennlp elmo-embed: error: input file not found: nope.txt"
    )


def test_an_escaping_exception_is_its_traceback_and_exit_status_1(tmp_path):
    result = run_allennlp_in_process(
        ["evaluate", str(tmp_path / "missing.tar.gz"), "x.txt"], check=False
    )
    assert result.returncode == 1 and "Traceback" in result.stderr


@pytest.mark.slow
def test_a_fresh_process_gives_what_a_fork_gives(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    embed = ["allennlp", "elmo-embed", str(OLD_BILM_ARCHIVE), "nope.txt", "out.hdf5"]
    module = ["-m", "benchmarks.run_all", "--help"]  # a benchmark module, imports cheap
    for command in (embed, module):
        fork, fresh = (run_forked(command, tmp_path, env, fresh=new) for new in (False, True))
        assert (fresh.returncode, fresh.stdout) == (fork.returncode, fork.stdout)
        assert fresh.stderr.strip().splitlines()[-1:] == fork.stderr.strip().splitlines()[-1:]
    assert fork.returncode == 0 and "usage" in fork.stdout
    assert fresh.args == module


def test_a_client_killed_kills_its_forked_command_and_what_that_started(tmp_path):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    client = start_forked(
        ["-m", "tests.test_in_process_runner"], tmp_path, env, stdout=subprocess.PIPE, text=True
    )
    sleeper = int(client.stdout.readline())
    command = int(Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[1])
    client.kill()
    assert client.wait() == -signal.SIGKILL
    deadline = time.time() + 10
    while (running(command) or running(sleeper)) and time.time() < deadline:
        time.sleep(0.05)
    assert command != client.pid and not running(command) and not running(sleeper)


def test_a_forked_commands_workers_are_its_forks_and_die_with_its_client(tmp_path):
    """`torch.multiprocessing.spawn` in a forked command (`allennlp train`'s distributed workers)
    forks the command's own workers, in its process group: a client killed takes them too. With a
    thread besides the main one (a fork could inherit a lock it holds) it is torch's spawn."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")  # no OpenMP threads
    command = ["-m", "tests.spawned_workers"]
    client = start_forked([*command, "600"], tmp_path, env, stdout=subprocess.PIPE, text=True)
    workers = [client.stdout.readline().split() for _ in range(2)]
    assert [how for _, how in workers] == ["forked", "forked"]
    pids = [int(pid) for pid, _ in workers]
    parents = {Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] for pid in pids}
    assert len(parents) == 1 and int(parents.pop()) != client.pid
    client.kill()
    assert client.wait() == -signal.SIGKILL
    deadline = time.time() + 10
    while any(running(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in pids)
    spawned = run_forked([*command, "0", "--with-a-thread"], tmp_path, env)
    assert spawned.returncode == 0, spawned.stderr[-3000:]
    assert [line.split()[1] for line in spawned.stdout.splitlines()] == ["spawned", "spawned"]


@pytest.mark.skipif(network_hosts.unavailable_reason() is not None, reason="needs root and ip")
def test_a_client_in_a_network_namespace_has_its_command_run_there(tmp_path):
    """`ip netns exec HOST client`: the command forked from the server (outside the namespace)
    runs inside it, as a process started there would (benchmarks/multi_node.py's hosts)."""
    command, env = forked_client(
        ["-m", "tests.test_in_process_runner", "network-namespace"], dict(os.environ), 60, False
    )
    with network_hosts.network_hosts("f") as hosts:
        inside = [host.command(["stat", "-L", "-c", "%i", "/proc/self/ns/net"]) for host in hosts]
        expected = [subprocess.run(line, capture_output=True, text=True).stdout for line in inside]
        forked = [
            subprocess.run(host.command(command), env=env, capture_output=True, text=True)
            for host in hosts
        ]
    assert [run.stdout for run in forked] == expected, [run.stderr[-3000:] for run in forked]
    assert (
        len(set(expected)) == 2 and str(os.stat("/proc/self/ns/net").st_ino) + "\n" not in expected
    )


def start_a_child_and_wait() -> None:
    """As `python -m tests.test_in_process_runner`: starts `sleep 600`, prints its pid, waits."""
    sleeper = subprocess.Popen(["sleep", "600"])
    print(sleeper.pid, flush=True)
    sleeper.wait()


def process_state() -> tuple:
    root = logging.getLogger()
    return (
        list(root.handlers),
        root.level,
        list(sys.path),
        sys.excepthook,
        torch.get_num_threads(),
        torch.get_default_dtype(),
    )


def test_train_leaves_logging_paths_random_states_and_torch_settings_as_they_were(
    tiny_corpus, tmp_path
):
    random.seed(5)
    numpy.random.seed(5)
    torch.manual_seed(5)
    before = process_state()
    expected = (random.random(), numpy.random.rand(), torch.rand(1).item())
    random.seed(5)
    numpy.random.seed(5)
    torch.manual_seed(5)
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "valid.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{"trainer.num_epochs": 1},
    )
    result = run_allennlp_in_process(
        ["train", str(CONFIG_DIR / "elmo_lstm.jsonnet"), "-s", str(tmp_path / "out")]
        + ["-o", overrides(values)],
        cwd=tmp_path,
    )
    assert (tmp_path / "out" / "model.tar.gz").is_file()
    assert "process settings: heap kept" in result.stdout + result.stderr
    assert process_state() == before
    assert (random.random(), numpy.random.rand(), torch.rand(1).item()) == expected


def sigterm_default() -> bool:
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def print_a_spawn_pool_workers_sigterm() -> None:
    """As `python -m tests.test_in_process_runner pool-sigterm`: allennlp's SIGTERM handler (as
    `allennlp`'s own start installs it), then a spawn-context pool, as `elmo-vocab --workers`'."""
    import multiprocessing

    from allennlp.common.util import install_sigterm_handler

    install_sigterm_handler()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print(pool.apply(sigterm_default), sigterm_default(), flush=True)


def test_a_forked_commands_spawn_pool_workers_have_pythons_default_sigterm(tmp_path):
    """Forks in place of spawned workers end on SIGTERM as spawned ones do (the pool's
    `terminate`): allennlp's handler, which raises an exception, stays the command's own."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    result = run_forked(["-m", "tests.test_in_process_runner", "pool-sigterm"], tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["True", "False"]


if __name__ == "__main__":
    if sys.argv[1:] == ["network-namespace"]:
        print(os.stat("/proc/self/ns/net").st_ino)
    elif sys.argv[1:] == ["pool-sigterm"]:
        print_a_spawn_pool_workers_sigterm()
    else:
        start_a_child_and_wait()
