"""`python -m benchmarks.gpu_original_elmo` (a process forked from the tests' warm server):
`--help` and the shrunk `--dry-run` work on any machine; each run compiles afresh."""

import json
import os
import subprocess
import threading

import pytest
import torch

from benchmarks.gpu_original_elmo import compilation, fresh_compilation
from elmo_plugin.modules import sequence_clipped_lstm
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
        "`--pool mean`",
        "computation alone",
        "max abs difference to the CPU",
    ):
        assert words in result.stdout


@pytest.mark.slow
def test_dry_run_trains_both_configs_and_embeds_on_cpu_and_leaves_no_temporary_files(tmp_path):
    """Both configs at two batch sizes with both steppers, the dense softmax at the larger, every
    run profiled (1 step each: torch's profiler takes seconds to read a step's events), each
    compared with a baseline run of the same config, precision, batch size and stepper; the
    graph stepper's losses (eager here, on a CPU) against the eager ones."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    baseline = tmp_path / "baseline.json"
    old = {"config": "elmo_lstm_original.jsonnet", "precision": "bf16", "tokens_per_s": 1.0}
    baseline.write_text(json.dumps({"results": [old]}))
    result = run(
        "--dry-run",
        "--precisions",
        "bf16",
        "--batch-sizes",
        "128,384",
        "--dense-softmax",
        "--profile-steps",
        "1",
        "--baseline",
        str(baseline),
        "--out",
        str(tmp_path / "out"),
        TMPDIR=str(temporary),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(temporary.iterdir()) == []
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    training = [r for r in report["results"] if "config" in r]
    configs = ("elmo_lstm_original.jsonnet", "elmo_transformer_original.jsonnet")
    assert sorted(
        (r["config"], r["batch_size"], r["softmax"], r["stepper"]) for r in training
    ) == sorted(
        [
            *(
                (config, batch, "rows", stepper)
                for config in configs
                for batch in (128, 384)
                for stepper in ("eager", "graph")
            ),
            ("elmo_lstm_original.jsonnet", 384, "dense", "eager"),
        ]
    )
    for r in training:  # no CUDA graph and nothing compiled on a CPU: the runs say so
        if r["stepper"] == "graph":
            assert not r["captured"] and r["eager_reason"] == "the device is cpu, not CUDA"
        assert r["tokens_per_s"] > 0 and r["flops_per_step"] > 0 and r["tokens_per_step"] > 0
        assert not r["compiled_lstm_steps"] and r["dynamo_graphs"] == 0
    assert result.stdout.count("  graph ran eagerly: the device is cpu, not CUDA\n") == 4
    (line,) = [
        line
        for line in result.stdout.splitlines()
        if " 128 rows    eager " in line and "lstm" in line
    ]
    assert line.split()[-1] == f"{training[0]['tokens_per_s']:.2f}x"  # against tokens/s 1.0
    assert line.split()[-3] == "-"  # compiled: the plain LSTM steps ran
    profiles = [r["profile"] for r in training]
    assert len(profiles) == 9 and all(0 <= p["gpu_busy_share"] <= 1 for p in profiles)
    assert all(p["profiled_steps"] == 1 for p in profiles)  # as asked, on a dry run too
    for profile in profiles:  # where a step's time goes, host operators first on a CPU
        assert profile["top_host_operators"][0][0].startswith("aten::")
        assert {"kernels_per_step", "host_syncs_per_step", "host_sync_wait_s_per_step"} <= set(
            profile
        )
    checks = [r for r in report["results"] if "graph_vs_eager" in r]
    assert sorted(check["graph_vs_eager"] for check in checks) == sorted(configs)
    for check in checks:  # no CUDA graph on a CPU: both steppers eager, the same losses
        assert not check["captured"] and check["max_relative_difference"] == 0
        assert check["eager_reason"] == "the device is cpu, not CUDA"
        assert len(check["losses"]["graph"]) == 6
    (embedding,) = [r for r in report["results"] if "speedup" in r]
    rates = ("fp32", "bf16", "float16", "pool_mean", "computation_only", "allennlp_elmo")
    assert all(embedding[f"{rate}_tokens_per_s"] > 0 for rate in rates)
    assert embedding["disk_bound_float32_tokens_per_s"] > 0
    # on a CPU the float32 run is the CPU's own path: the same vectors; bf16 close to them
    differences = embedding["max_abs_diff_vs_cpu"]
    assert differences["fp32"] == 0 and 0 < differences["bf16"] < 0.1


def test_fresh_compilation_makes_a_compiled_function_compile_again_and_new_lstm_steps(
    monkeypatch,
):
    """Each run starts from a reset dynamo: a function compiled before compiles again (a kept
    cache would count no graph), and the LSTM's compiled steps are made anew; once a compiled
    step failed in the process, the runs say the LSTM ran the plain ones."""
    monkeypatch.setattr(sequence_clipped_lstm, "COMPILE_FAILED", threading.Event())
    double = torch.compile(lambda x: x * 2, backend="eager")
    steps = sequence_clipped_lstm.compiled_steps()
    fresh_compilation()
    double(torch.ones(3))
    double(torch.ones(3))
    assert compilation() == {"compiled_lstm_steps": False, "dynamo_graphs": 1}
    fresh_compilation()
    assert double(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert compilation() == {"compiled_lstm_steps": False, "dynamo_graphs": 1}
    assert sequence_clipped_lstm.compiled_steps() is not steps
    assert compilation()["compiled_lstm_steps"]
    sequence_clipped_lstm.COMPILE_FAILED.set()
    assert not compilation()["compiled_lstm_steps"]
