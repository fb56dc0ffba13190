"""Every child process a benchmark starts, one way: its stdout and stderr in a named log file,
its own process group (a timeout or `kill()` ends everything it started), and what it cost once
reaped (`os.wait4`). The cost is wall seconds, CPU seconds (user + system, its own children's
included) and peak RSS (its largest process's, counted from the fork: at least this process's
size then). A failure is one error naming the command and its log, ending with the log's last
lines. Children run from the repo root with the repository first on their path (the package they
measure is this checkout's), Python warnings off, no core files, and faulthandler on: a child
stopped for a timeout writes every thread's Python stack into its log first."""

import os
import resource
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

from benchmarks.support.common import REPO_ROOT

POLL_S = 0.2
STACK_DUMP_S = 5.0  # for a stopped child to write its stacks before it is killed
KILLED_S = 1.0  # for killed processes to be gone
TAIL_LINES = 20


class Child:
    """`command` started now, its output in `log`, `env` on top of this process's environment.
    Once reaped: `returncode`, `wall_s`, `cpu_s`, `peak_rss_mib`; `start` and `ended` are
    `time.perf_counter()` readings."""

    def __init__(self, command: list[str], log: Path, env: Optional[dict[str, str]] = None):
        self.command, self.log = command, log
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        environment = dict(
            os.environ, PYTHONPATH=path, PYTHONWARNINGS="ignore", PYTHONFAULTHANDLER="1"
        )
        log.parent.mkdir(parents=True, exist_ok=True)
        self.returncode: Optional[int] = None
        self.ended: Optional[float] = None
        self.start = time.perf_counter()
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env={**environment, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=no_core_files,
            )

    def reap(self, block: bool) -> Optional[int]:
        """Its exit status (minus the signal that ended it), None while it runs (`block`: waits)."""
        if self.returncode is None:
            pid, status, usage = os.wait4(self.process.pid, 0 if block else os.WNOHANG)
            if pid:
                self.ended = time.perf_counter()
                self.wall_s = self.ended - self.start
                self.cpu_s = usage.ru_utime + usage.ru_stime
                self.peak_rss_mib = round(usage.ru_maxrss / 1024, 1)
                self.returncode = os.waitstatus_to_exitcode(status)
                self.process.returncode = self.returncode  # reaped here, not by subprocess
        return self.returncode

    def poll(self) -> Optional[int]:
        return self.reap(block=False)

    def send(self, number: int) -> bool:
        """Sends `number` to every process left in its group (its leader's pid names the group
        while any of them runs, even once the leader is reaped) -> whether any was left (an
        unreaped zombie counts); 0 only asks."""
        try:
            os.killpg(self.process.pid, number)
        except ProcessLookupError:
            return False
        return True

    def wait_group(self, seconds: float) -> None:
        """Until no process of its group is left (the leader reaped here), at most `seconds`."""
        deadline = time.time() + seconds
        while self.poll() is None or self.send(0):
            if time.time() > deadline:
                return
            time.sleep(POLL_S / 10)

    def kill(self) -> None:
        """SIGKILL to its process group; returns once the leader is reaped and the rest gone."""
        self.send(signal.SIGKILL)
        self.reap(block=True)
        self.wait_group(KILLED_S)

    def stop(self, grace_s: float = STACK_DUMP_S) -> None:
        """Every process of its group writes its threads' Python stacks into the log (SIGABRT to
        faulthandler); what is left after `grace_s` seconds is killed."""
        self.send(signal.SIGABRT)
        self.wait_group(grace_s)
        self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def check(self, what: str = "") -> "Child":
        """Itself once ended (waits for it), or RuntimeError naming `what` (default: the
        command's first two words), the exit status and the log, with the log's last lines."""
        if self.reap(block=True) != 0:
            name = what or " ".join([Path(self.command[0]).name, *self.command[1:2]])
            tail = "".join(self.output().splitlines(True)[-TAIL_LINES:])
            raise RuntimeError(
                f"{name} failed (exit status {self.returncode}), see {self.log}:\n{tail}"
            )
        return self


def no_core_files() -> None:
    """In a child before it starts: a stack-dumping abort leaves no core file behind."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def wait(children: list[Child], timeout: float) -> None:
    """Until every child ended; after `timeout` seconds, stops them all (`Child.stop`: their
    stacks end their logs) and raises TimeoutError naming the logs."""
    deadline = time.time() + timeout
    while any(child.poll() is None for child in children):
        if time.time() > deadline:
            for child in children:
                child.stop()
            logs = ", ".join(str(child.log) for child in children)
            raise TimeoutError(f"still running after {timeout:.0f} s, stopped (stacks in {logs})")
        time.sleep(POLL_S)


def one_thread(command: list[str], log: Path) -> dict[str, float]:
    """`command` run on one thread -> its wall and CPU seconds."""
    one = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"}  # tokenizers
    child = Child(command, log, one).check()
    return {"wall_s": round(child.wall_s, 1), "cpu_s": round(child.cpu_s, 1)}
