"""benchmarks/support/child.py, the one way a benchmark runs a command: its figures from
`os.wait4`, a failure naming the command and its log with the log's end, and a timeout that stops
every process the command started after each wrote its Python stacks into the log."""

import sys
import time
from pathlib import Path

import pytest

from benchmarks.support.child import Child, wait
from tests.helpers import running


def test_a_child_reports_its_wall_and_cpu_seconds_and_peak_rss(tmp_path):
    """Measured from a small Python process: a child's peak RSS counts from its fork, where it
    is the parent's size (pytest's here)."""
    busy = "block = bytearray(200 * 2**20); sum(i * i for i in range(3_000_000))"
    measure = (
        "import sys; from pathlib import Path; from benchmarks.support.child import Child\n"
        f"child = Child([sys.executable, '-c', {busy!r}], Path({str(tmp_path / 'busy.log')!r}))\n"
        "child.check()\n"
        "print(child.wall_s, child.cpu_s, child.peak_rss_mib, child.ended - child.start)\n"
    )
    parent = Child([sys.executable, "-c", measure], tmp_path / "measure.log").check()
    wall_s, cpu_s, peak_rss_mib, ended_s = map(float, parent.output().split())
    assert (tmp_path / "busy.log").read_text() == ""
    assert 0 < cpu_s <= wall_s + 0.5 and wall_s == ended_s
    assert 200 <= peak_rss_mib < 300 <= parent.peak_rss_mib


def test_a_failed_child_names_its_command_and_log_and_ends_with_the_logs_last_lines(tmp_path):
    lines = "".join(f"print('line {n}'); " for n in range(30))
    script = f"import sys; {lines}sys.exit(3)"
    log = tmp_path / "logs" / "fail.log"
    with pytest.raises(RuntimeError) as error:
        Child([sys.executable, "-c", script], log).check()
    tail = "".join(f"line {n}\n" for n in range(10, 30))
    name = Path(sys.executable).name
    assert str(error.value) == f"{name} -c failed (exit status 3), see {log}:\n{tail}"


def hung_child(tmp_path: Path, grandchild_setup: str = "") -> tuple[Child, int]:
    """A child that started a grandchild; both wait forever in named functions. Returns the
    child once both said so, and the grandchild's pid."""
    grandchild = (
        f"import signal, time\n{grandchild_setup}\n"
        "def grandchild_waiting():\n"
        "    print('grandchild waiting', flush=True)\n"
        "    time.sleep(600)\n"
        "grandchild_waiting()\n"
    )
    script = (
        "import resource, subprocess, sys, time\n"
        f"started = subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
        "def waiting_forever():\n"
        "    print('waiting', started.pid, resource.getrlimit(resource.RLIMIT_CORE), flush=True)\n"
        "    time.sleep(600)\n"
        "waiting_forever()\n"
    )
    child = Child([sys.executable, "-c", script], tmp_path / "hung.log")
    while child.output().count("waiting") < 2 and child.poll() is None:
        time.sleep(0.1)
    return child, int(child.output().split("waiting ")[1].split()[0])


def test_a_timeout_stops_the_child_and_what_it_started_after_their_stacks(tmp_path):
    child, grandchild_pid = hung_child(tmp_path)
    with pytest.raises(TimeoutError, match=f"still running after 0 s, stopped .*{child.log}"):
        wait([child], 0.0)
    assert child.returncode is not None and not running(grandchild_pid)
    output = child.output()
    assert f"waiting {grandchild_pid} (0, 0)" in output  # no core file from the abort
    assert "most recent call first" in output
    assert "waiting_forever" in output and "grandchild_waiting" in output


def test_what_outlives_the_stopped_child_is_killed_too(tmp_path):
    """The child ends at once; its grandchild ignores the stack signal and is killed after the
    grace seconds."""
    child, grandchild_pid = hung_child(tmp_path, "signal.signal(signal.SIGABRT, signal.SIG_IGN)")
    child.stop(grace_s=0.5)
    assert child.returncode == -6 and not running(grandchild_pid)
