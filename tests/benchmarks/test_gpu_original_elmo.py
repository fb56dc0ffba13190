"""`python -m benchmarks.gpu_original_elmo` (a process forked from the tests' warm server):
`--help` and the shrunk `--dry-run` work on any machine."""

import json
import os
import subprocess

from tests.helpers import REPO_ROOT, run_forked


def run(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        PYTHONWARNINGS="ignore",
        **env_overrides,
    )
    return run_forked(["-m", "benchmarks.gpu_original_elmo", *args], REPO_ROOT, env)


def test_help_names_every_measurement():
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for words in (
        "tokens/s",
        "peak GPU memory",
        "FlopCounterMode",
        "--dry-run",
        "allennlp's `Elmo`",
    ):
        assert words in result.stdout


def test_dry_run_trains_both_configs_and_embeds_on_cpu_and_leaves_no_temporary_files(tmp_path):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = run(
        "--dry-run",
        "--precisions",
        "fp32,bf16",
        "--out",
        str(tmp_path / "out"),
        TMPDIR=str(temporary),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(temporary.iterdir()) == []
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    training = [r for r in report["results"] if "config" in r]
    assert {(r["config"], r["precision"]) for r in training} == {
        (config, precision)
        for config in ("elmo_lstm_original.jsonnet", "elmo_transformer_original.jsonnet")
        for precision in ("fp32", "bf16")
    }
    for r in training:
        assert r["tokens_per_s"] > 0 and r["flops_per_step"] > 0 and r["tokens_per_step"] > 0
    profiles = [r["profile"] for r in training if r["precision"] == "bf16"]
    assert len(profiles) == 2
    for profile in profiles:  # where a step's time goes, host operators first on a CPU
        assert profile["top_host_operators"][0][0].startswith("aten::")
        assert {"kernels_per_step", "host_syncs_per_step", "host_sync_wait_s_per_step"} <= set(
            profile
        )
    embedding = [r for r in report["results"] if "speedup" in r]
    assert len(embedding) == 1 and embedding[0]["ours_elmo_embed_tokens_per_s"] > 0
