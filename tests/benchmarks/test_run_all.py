"""benchmarks/run_all.py reads each benchmark's last line as JSON: ok, missed, skipped, failed,
and anything else as failed."""

import json

import pytest

from benchmarks import run_all
from benchmarks.support.common import benchmark_names, result_line


def outcome(output: str, returncode: int = 0) -> tuple[str, str]:
    result = run_all.read_outcome("data_pipeline", returncode, output, 12.0)
    assert (result.name, result.seconds) == ("data_pipeline", 12.0)
    return result.status, result.figure


def test_an_ok_line_shows_the_figures_its_headline_names():
    line = result_line(
        "data_pipeline",
        "ok",
        headline=["ratio_ours_theirs_0_workers"],
        ratio_ours_theirs_0_workers=3.42,
        corpus="generated",
    )
    assert outcome("progress\n{not this one}\n" + line + "\n\n") == (
        "ok",
        "ratio_ours_theirs_0_workers=3.42",
    )


def test_a_missed_target_is_missed_not_failed_and_says_which():
    line = result_line(
        "data_pipeline", "ok", headline=["ratio"], ratio=2.5, missed="ratio 2.50, goal 3.0"
    )
    assert outcome(line, returncode=1) == ("missed", "ratio=2.5; missed ratio 2.50, goal 3.0")


def test_a_skipped_line_shows_its_reason():
    line = result_line("data_pipeline", "skipped", reason="real data not found: /x")
    assert outcome(line) == ("skipped", "real data not found: /x")


def test_a_failed_line_shows_the_exit_status_and_error():
    line = result_line("data_pipeline", "failed", error="ValueError: bad")
    assert outcome(line, returncode=1) == ("failed", "exit 1: ValueError: bad")


def test_a_last_line_that_is_not_a_result_fails_with_it():
    status, figure = outcome('{"name": "data_pipeline", "status": "ok"}\nratio 3.4x', 0)
    assert status == "failed"
    assert figure == "exit 0, last line not a result: 'ratio 3.4x'"
    assert outcome("", 137)[0] == "failed"
    assert outcome('["name", "status"]')[0] == "failed"
    assert outcome(json.dumps({"name": "data_pipeline", "status": "missed"}))[0] == "failed"


def test_another_benchmarks_line_or_a_nonzero_exit_after_ok_fails():
    assert outcome(result_line("exact_resume", "ok")) == (
        "failed",
        "result line of 'exact_resume'",
    )
    assert outcome(result_line("data_pipeline", "ok", headline=["x"], x=1), returncode=3) == (
        "failed",
        "exit 3 after an ok line: x=1",
    )


def test_run_all_runs_every_benchmark_declaring_quick_options_with_them():
    benchmarks = dict(run_all.quick_benchmarks())
    assert set(benchmarks) == set(benchmark_names()) - {"scale_rehearsal", "multi_node"}
    assert benchmarks["quality_table"] == ["--quick"]


def test_run_all_ends_with_its_own_line_and_fails_only_on_a_failed_benchmark(monkeypatch, capsys):
    statuses = {"exact_resume": "missed", "quality_table": "skipped", "data_pipeline": "ok"}
    benchmarks = [run_all.Benchmark(name, []) for name in statuses]
    monkeypatch.setattr(run_all, "quick_benchmarks", lambda: benchmarks)
    monkeypatch.setattr(
        run_all, "run", lambda b, timeout, logs: run_all.Outcome(b.name, statuses[b.name], 1.0, "")
    )
    with pytest.raises(SystemExit) as stop:
        run_all.main([])
    assert stop.value.code == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last == {"name": "run_all", "status": "ok", "benchmarks": statuses}

    statuses["data_pipeline"] = "failed"
    with pytest.raises(SystemExit) as stop:
        run_all.main([])
    assert stop.value.code == 1
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last == {
        "name": "run_all",
        "status": "failed",
        "benchmarks": statuses,
        "error": "failed: data_pipeline",
    }
