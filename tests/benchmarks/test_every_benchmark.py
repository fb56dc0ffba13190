"""Every benchmark runs as `python -m benchmarks.NAME` (a process forked from the tests' warm
server: `run_forked`, as are the `allennlp` commands it runs: ELMO_BENCHMARKS_ALLENNLP) and ends
with exactly one JSON line (benchmarks/support/common.py), checked on a cheap path of each: real
data missing (ELMO_PLUGIN_DATA an empty folder), no CUDA device, a dry run, its smallest sizes,
or a bad option (where even the smallest run takes minutes on a loaded machine)."""

import json
import os
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from benchmarks import plan_vs_epoch
from benchmarks.support.common import ALLENNLP_ENV, benchmark_names, declaration
from tests.helpers import REPO_ROOT, forked_allennlp_script, run_forked

BENCHMARKS = benchmark_names()
COMMAND = re.compile(r"-m benchmarks\.(\w+)")


def test_the_docs_list_every_benchmark_once():
    text = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    listed = COMMAND.findall(text.split("```bash\n", 1)[1].split("```", 1)[0])
    assert sorted(listed) == BENCHMARKS


def run_module(name: str, options: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        ELMO_PLUGIN_DATA=str(tmp_path / "data"),
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
        PYTHONWARNINGS="ignore",
    )
    (tmp_path / "bin").mkdir()
    env[ALLENNLP_ENV] = str(forked_allennlp_script(tmp_path / "bin"))  # warm `allennlp` children
    if name in ("scale_rehearsal", "plan_vs_epoch", "multi_node"):
        options = [*options, "--workdir", str(tmp_path / "work")]
    if name == "bf16_vs_float32":
        options = [*options, "--out", str(tmp_path / "work")]
    return run_forked(["-m", f"benchmarks.{name}", *options], REPO_ROOT, env)


def json_objects(stdout: str) -> list[dict]:
    objects = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and "status" in value:
            objects.append(value)
    return objects


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_ends_with_exactly_one_json_line_naming_it_and_its_status(name, tmp_path):
    options, status, missing = declaration(name)[1:]
    (tmp_path / "data").mkdir()
    result = run_module(name, options, tmp_path)
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr[-3000:]
    last = json.loads(lines[-1])
    assert json_objects(result.stdout) == [last]
    assert (last["name"], last["status"]) == (name, status), result.stderr[-3000:]
    assert result.returncode == (1 if status == "failed" or "missed" in last else 0)
    if status == "skipped" and missing:
        paths = ", ".join(str(tmp_path / "data" / path) for path in missing)
        assert last["reason"] == (
            f"real data not found: {paths} (set ELMO_PLUGIN_DATA to the shared data folder)"
        )
    elif status == "skipped":
        assert (
            last["reason"] == "no CUDA device here (--dry-run runs the shrunk version on the CPU)"
        )
    elif status == "failed":
        assert last["error"] == "exit status 2 (see stderr)"
        assert "error: argument" in result.stderr
    else:
        assert set(last["headline"]) <= set(last)
        CHECK_OK[name](last)
    if name == "plan_vs_epoch":  # each run's folder (GBs at the original's size) removed once read
        assert not list((tmp_path / "work").glob("*_checks"))


def check_scale_rehearsal(last: dict) -> None:
    assert last["headline"] == ["step_time_ratio_793k_vs_50k"]
    assert last["stage"] == "summary" and last["step_time_ratio_793k_vs_50k"] is None
    assert [stage["stage"] for stage in last["stages"]] == ["corpus", "elmo-vocab"]


def check_data_pipeline(last: dict) -> None:
    ours, theirs = last["ours_tokens_per_s_0_workers"], last["theirs_tokens_per_s_0_workers"]
    assert last["ratio_ours_theirs_0_workers"] == round(ours / theirs, 2)
    assert last["goal_ratio"] == 3.0
    assert ("missed" in last) == (ours / theirs < 3.0)


def check_exact_resume(last: dict) -> None:
    assert last["late_batch"] == int(last["batches_in_epoch"] * 0.9) and last["early_batch"] == 5
    ratio = last["replay_late_s"] / last["ours_late_s"]
    assert last["late_replay_over_ours"] == round(ratio, 1)


def check_plan_vs_epoch(last: dict) -> None:
    """The demo case alone (the original case is the same measurement of another config, its
    runs' settings checked in test_plan_vs_epoch.py)."""
    assert [case["case"] for case in last["cases"]] == ["demo"]
    for case in last["cases"]:
        # seconds are rounded to 0.1 and the ratio to 0.001 (tiny epochs last a few seconds)
        ratio = last[f"{case['case']}_projected_over_real"]
        rounding = 0.05 * (1 + ratio) + 0.0005 * case["real_epoch_s"]
        assert ratio * case["real_epoch_s"] == pytest.approx(
            case["projected_epoch_s"], abs=rounding + 1e-9
        )
        assert case["projected_epoch_s"] == pytest.approx(
            sum(case["projected_parts_s"].values()), abs=0.3
        )
        assert case["checks_in_epoch"] > 0 and 0 < case["checks_s"] < case["real_epoch_s"]
        assert 0 < case["checks_validation_s"] <= case["checks_s"]
        assert case["checks_share"] == pytest.approx(
            case["checks_s"] / (case["real_epoch_s"] - case["checks_s"]), rel=0.1
        )
    assert last["cases"][0]["users_checks"] == plan_vs_epoch.TINY_DEMO_CHECKS
    assert ("missed" in last) == (
        abs(last["demo_projected_over_real"] - 1) > 0.2
        or last["demo_checks_share_at_users_interval"] >= 0.05
    )


def check_multi_node(last: dict) -> None:
    """A dry run (no root needed): the one-host and the two-host stages' commands only."""
    assert [stage["stage"] for stage in last["stages"]] == ["one_host", "two_hosts"]
    assert last["headline"] == []


def check_step_audit(last: dict) -> None:
    assert last["headline"] == ["transformer_gpu_path_syncs"]
    assert last["transformer_gpu_path_syncs"] == 0 and "missed" not in last
    assert last["transformer_cpu_defaults_syncs"] > 0


def check_bf16_vs_float32(last: dict) -> None:
    """The tiny runs: each trained in its precision with its seed, and the figures from them."""
    runs = last["runs"]
    assert sorted(runs) == ["bf16_seed0", "float32_seed0", "float32_seed1"]
    for name in runs:
        precision, seed = name.split("_seed")
        config = json.loads((Path(last["out"]) / name / "run" / "config.json").read_text())
        assert config["model"].get("mixed_precision") == ("bf16" if precision == "bf16" else None)
        assert config["pytorch_seed"] == config["random_seed"] == int(seed)
    float32 = [runs["float32_seed0"]["perplexity"], runs["float32_seed1"]["perplexity"]]
    mean, sd = statistics.mean(float32), statistics.stdev(float32)
    bf16 = runs["bf16_seed0"]["perplexity"]
    assert last["float32_perplexity_mean"] == round(mean, 2) and last["bf16_perplexity"] == [bf16]
    assert last["bf16_minus_float32_same_seed"] == [round(bf16 - float32[0], 2)]
    assert last["bf16_within_seed_spread"] == (abs(bf16 - mean) <= 2 * sd)
    assert last["bf16_over_float32_perplexity"] == round(bf16 / mean, 3)
    assert "missed" not in last  # --tiny: rough numbers, no verdict on them


CHECK_OK = {
    "bf16_vs_float32": check_bf16_vs_float32,
    "step_audit": check_step_audit,
    "multi_node": check_multi_node,
    "scale_rehearsal": check_scale_rehearsal,
    "data_pipeline": check_data_pipeline,
    "exact_resume": check_exact_resume,
    "plan_vs_epoch": check_plan_vs_epoch,
}
