"""`make test`: the suite in one worker process per core (at most 4), in a random order that the
seed repeats (the slow tests first: tests/test_suite_order.py), handed out in chunks of at most
16 tests, ending with its 15 slowest tests; `.ci/run`'s two suites, side by side, one worker
each. Read from `make -n` (the commands, not run). And `make install`'s registration of the
plugin, run only where needed."""

import os
import subprocess

from tests.helpers import REPO_ROOT


def pytest_command(*variables: str, target: str = "test") -> list[str]:
    """The pytest line of `make -n TARGET VARIABLES`, outside any make this suite runs under (whose
    command-line variables, `.ci/run`'s TEST_WORKERS=1, would reach it through MAKEFLAGS)."""
    outside = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TEST_WORKERS", "TEST_SEED")
    made = subprocess.run(
        ["make", "-n", target, "TEST_SEED=7", *variables],
        env={name: value for name, value in os.environ.items() if name not in outside},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    (line,) = [line for line in made.stdout.splitlines() if " -m pytest tests " in line]
    return line.split()


def test_make_test_runs_one_worker_per_core_at_most_four_in_the_seeds_order():
    command = pytest_command()
    workers = command[command.index("-n") + 1]
    assert workers == str(min(len(os.sched_getaffinity(0)), 4))
    assert "--randomly-seed=7" in command and "--durations=15" in command
    assert "--maxschedchunk=16" in command
    one = pytest_command("TEST_WORKERS=1")
    assert one[one.index("-n") + 1] == "1"


def test_make_coverage_runs_the_same_suite_with_one_data_file_location():
    """Each process's coverage data file in the checkout, not in its working directory (a
    command run in a test's folder would leave `.coverage.*` files among the outputs the test
    reads)."""
    command = pytest_command(target="coverage")
    assert f"COVERAGE_FILE={REPO_ROOT}/.coverage" in command and "--cov" in command
    assert "--maxschedchunk=16" in command and "--randomly-seed=7" in command


def test_ci_runs_both_suites_with_one_worker_each():
    script = (REPO_ROOT / ".ci" / "run").read_text()
    suites = [line for line in script.splitlines() if "make test " in line]
    assert len(suites) == 2 and all("TEST_WORKERS=1" in line for line in suites)


def test_make_install_registers_the_plugin_only_where_the_plugins_file_lacks_it(tmp_path):
    """`make install` over an installed venv (its stamp newer than what it depends on) whose
    Python records its calls: none where ~/.allennlp/plugins lists elmo_plugin, one to
    register it where the file is missing."""
    venv, calls = tmp_path / "venv", tmp_path / "calls.txt"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    python.chmod(0o755)
    (venv / ".installed").touch()
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home)}
    for variable in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(variable, None)
    make = ["make", "install", f"VENV={venv}"]
    (home / ".allennlp").mkdir(parents=True)
    (home / ".allennlp" / "plugins").write_text("other_plugin\nelmo_plugin\n")
    subprocess.run(make, env=env, cwd=REPO_ROOT, check=True, capture_output=True, timeout=60)
    assert not calls.exists()
    (home / ".allennlp" / "plugins").unlink()
    subprocess.run(make, env=env, cwd=REPO_ROOT, check=True, capture_output=True, timeout=60)
    assert calls.read_text() == "-m elmo_plugin.commands.register_plugin\n"
