"""benchmarks/support/common.py: the one final JSON line and exit status of every benchmark."""

import json
import os
import sys

import pytest

from benchmarks.support import common
from tests.helpers import REPO_ROOT, shared_data_dir


def finished(capsys, main, argv=()) -> tuple[object, list[str]]:
    """Runs `main` through `common.run_benchmark` with `argv`; -> exit status, stdout lines."""
    saved = sys.argv
    sys.argv = ["benchmark", *argv]
    try:
        with pytest.raises(SystemExit) as stop:
            common.run_benchmark("fake", main)
    finally:
        sys.argv = saved
    return stop.value.code, capsys.readouterr().out.splitlines()


def test_an_ok_benchmark_ends_with_its_figures_as_one_json_line_and_exit_status_0(capsys):
    def main(argv):
        print("a human-readable line first")
        return {"headline": ["speedup"], "speedup": 10.5, "argv": argv}

    code, lines = finished(capsys, main, ["--quick"])
    assert code == 0
    assert lines[0] == "a human-readable line first"
    assert json.loads(lines[-1]) == {
        "name": "fake",
        "status": "ok",
        "headline": ["speedup"],
        "speedup": 10.5,
        "argv": ["--quick"],
    }
    assert list(json.loads(lines[-1]))[:2] == ["name", "status"]


def test_a_missed_target_keeps_status_ok_and_exits_1(capsys):
    code, lines = finished(capsys, lambda argv: {"ratio": 2.0, "missed": "ratio >= 3"})
    assert code == 1
    assert json.loads(lines[-1]) == {
        "name": "fake",
        "status": "ok",
        "ratio": 2.0,
        "missed": "ratio >= 3",
    }


def test_missing_data_is_skipped_with_the_missing_paths_and_exit_status_0(capsys, tmp_path):
    present = tmp_path / "present.txt"
    present.write_text("x")

    def main(argv):
        common.require_data(present, tmp_path / "absent.txt", tmp_path / "gone.conllu")
        return {"never": True}

    code, lines = finished(capsys, main)
    assert code == 0
    assert lines == [
        json.dumps(
            {
                "name": "fake",
                "status": "skipped",
                "reason": f"real data not found: {tmp_path / 'absent.txt'}, "
                f"{tmp_path / 'gone.conllu'} (set ELMO_PLUGIN_DATA to the shared data folder)",
            }
        )
    ]


def test_an_exception_fails_with_the_error_in_one_line_and_exit_status_1(capsys):
    def main(argv):
        print("measuring")
        raise ValueError("first line of the error\nsecond line")

    code, lines = finished(capsys, main)
    assert code == 1
    assert lines[0] == "measuring"
    assert json.loads(lines[-1]) == {
        "name": "fake",
        "status": "failed",
        "error": "ValueError: first line of the error",
    }
    assert len(lines) == 2


def test_sys_exit_with_a_message_or_a_number_fails_but_help_exits_as_usual(capsys):
    def stop(code):
        def main(argv):
            sys.exit(code)

        return main

    code, lines = finished(capsys, stop("allennlp train failed, see LOG:\ntail of the log"))
    assert code == 1
    assert json.loads(lines[-1])["error"] == "allennlp train failed, see LOG:"
    code, lines = finished(capsys, stop(2))
    assert (code, json.loads(lines[-1])["error"]) == (1, "exit status 2 (see stderr)")
    code, lines = finished(capsys, stop(0))
    assert (code, lines) == (0, [])


def test_a_status_outside_ok_skipped_failed_is_refused():
    with pytest.raises(ValueError, match="status 'missed'"):
        common.result_line("fake", "missed")


def test_shared_data_dir_is_elmo_plugin_data_or_shared_data_beside_the_repo(monkeypatch, tmp_path):
    monkeypatch.setenv("ELMO_PLUGIN_DATA", str(tmp_path))
    assert common.shared_data_dir() == tmp_path == shared_data_dir()
    monkeypatch.delenv("ELMO_PLUGIN_DATA")
    assert common.shared_data_dir() == REPO_ROOT.parent / "shared" / "data"
    assert "ELMO_PLUGIN_DATA" not in os.environ


def test_an_exception_without_a_message_fails_with_its_type_alone(capsys):
    def main(argv):
        raise AssertionError

    code, lines = finished(capsys, main)
    assert (code, json.loads(lines[-1])["error"]) == (1, "AssertionError")


def test_remove_heavy_files_removes_checkpoints_archives_and_hdf5_only(tmp_path):
    run = tmp_path / "stage" / "node0"
    run.mkdir(parents=True)
    for name, size in [("model_state_e0_b4.th", 3), ("model.tar.gz", 5), ("weights.hdf5", 7)]:
        (run / name).write_bytes(b"x" * size)
    for name in ("out.log", "metrics.json", "config.json"):
        (run / name).write_text("{}")
    assert common.remove_heavy_files(tmp_path) == 15
    assert sorted(path.name for path in run.iterdir()) == ["config.json", "metrics.json", "out.log"]
