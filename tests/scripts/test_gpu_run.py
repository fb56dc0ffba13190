"""scripts/gpu_run.sh --dry-run: the stages of one GPU call in order with estimates that fit its
600 s, the smoke's command run shrunk on the CPU (its results where the GPU call writes them),
stages that would overrun the budget skipped with a line, warnings left visible; and the call
itself on a machine without CUDA ends failed, saying why."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FORKED_ALLENNLP, REPO_ROOT, forked_client

SCRIPT = REPO_ROOT / "scripts" / "gpu_run.sh"
STAGE_LINE = re.compile(r"^(\w+) +(\d+)  (.*)$")


def forked_python(folder: Path) -> dict[str, str]:
    """FOLDER/python: `python -m MODULE ARGS...` (the stages' benchmark) as a fork of this
    session's warm server (tests/forked_allennlp.py: no seconds importing torch and allennlp;
    nothing here is about import time), any other command this Python -> the environment with
    FOLDER and this Python's folder first on PATH and the server's socket."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ]; then exec "{sys.executable}" -S "{FORKED_ALLENNLP}" 600 "$@"; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    _, env = forked_client(["-m"], dict(os.environ), 600, fresh=False)
    path = os.pathsep.join([str(folder), str(Path(sys.executable).parent), os.environ["PATH"]])
    return {**env, "PATH": path}


def dry_run(
    out: Path, *stages: str, forked: bool = False, **env: str
) -> subprocess.CompletedProcess:
    """`bash scripts/gpu_run.sh --dry-run STAGES` with this Python first on PATH, no GPU; with
    `forked`, its `python -m` a fork of the warm server (`forked_python`: where the smoke runs)."""
    python = forked_python(out.parent / "python_bin") if forked else {}
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        **python,
        "OUT": str(out),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *stages],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def listed(stdout: str) -> dict[str, tuple[int, str]]:
    """The dry run's table: stage -> (estimate in s, what it runs), `total` last."""
    matches = (STAGE_LINE.match(line) for line in stdout.splitlines())
    return {m[1]: (int(m[2]), m[3]) for m in matches if m}


@pytest.mark.slow
def test_the_default_call_lists_its_stages_in_order_within_600_s_and_runs_the_smoke_shrunk(
    tmp_path,
):
    result = dry_run(tmp_path / "out", forked=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = listed(result.stdout)
    assert list(table) == ["setup", "smoke", "tests", "lstm", "total"]
    total = table.pop("total")[0]
    assert total == sum(estimate for estimate, _ in table.values()) <= 600
    assert "of the 600 s of one call" in result.stdout
    left_out = re.findall(r"^not in this call: (\w+) (\d+)$", result.stdout, re.M)
    assert [name for name, _ in left_out] == ["baseline", "transformer", "embed", "train"]
    assert all(total + int(estimate) > 600 for _, estimate in left_out)
    smoke_command = table["smoke"][1].split()
    for option in ("--dense-softmax", "--no-embed"):
        assert option in smoke_command
    for option, value in (
        ("--configs", "lstm"),
        ("--precisions", "bf16"),
        ("--batch-sizes", "128"),
    ):
        assert smoke_command[smoke_command.index(option) + 1] == value
    # the smoke ran: its results where the GPU call writes them, one line in stages.tsv
    report = json.loads((tmp_path / "out" / "smoke" / "results.json").read_text())
    runs = [(r["softmax"], r["stepper"]) for r in report["results"] if "config" in r]
    assert runs == [("rows", "eager"), ("rows", "graph"), ("dense", "eager")]
    for r in report["results"]:
        assert (r.get("config") or r["graph_vs_eager"]) == "elmo_lstm_original.jsonnet"
        assert (r["precision"], r.get("batch_size", 128)) == ("bf16", 128)
        if r.get("stepper", "graph") == "graph":  # whether it captured, and why not
            assert not r["captured"] and r["eager_reason"] == "the device is cpu, not CUDA"
    assert "graph ran eagerly: the device is cpu, not CUDA" in result.stdout
    rows = [line.split("\t") for line in (tmp_path / "out" / "stages.tsv").read_text().splitlines()]
    assert rows[0] == ["stage", "estimate_s", "wall_s", "result"]
    assert [row[0] for row in rows[1:]] == ["smoke"] and rows[1][3] == "ok"
    assert rows[1][1] == str(table["smoke"][0]) and int(rows[1][2]) > 0


def test_named_stages_run_in_the_scripts_order_and_an_unknown_one_is_refused(tmp_path):
    result = dry_run(tmp_path / "out", "train", "baseline", "transformer")
    assert result.returncode == 0, result.stderr
    table = listed(result.stdout)
    assert list(table) == ["setup", "baseline", "transformer", "train", "total"]
    assert table["total"][0] == sum(table[name][0] for name in list(table)[:-1])
    assert "--baseline" not in table["transformer"][1]  # added where baseline's results exist
    assert table["baseline"][1].startswith("(cd .gpu_baseline && ")
    assert not (tmp_path / "out" / "smoke.log").exists()  # only the smoke runs on a dry run
    refused = dry_run(tmp_path / "out", "smoke", "bench")
    assert refused.returncode == 2
    assert refused.stderr == (
        "gpu_run: no stage 'bench' (stages: smoke tests baseline lstm transformer embed train)\n"
    )


def test_a_stage_whose_estimate_exceeds_the_budget_left_is_skipped_with_a_line(tmp_path):
    result = dry_run(tmp_path / "out", "smoke", BUDGET_S="100")
    assert result.returncode == 0, result.stderr
    assert re.search(
        r"^== smoke: skipped, its estimate 150 s is more than the \d+ s left$", result.stdout, re.M
    )
    rows = (tmp_path / "out" / "stages.tsv").read_text().splitlines()
    assert rows[1:] == ["smoke\t150\t-\tskipped"]
    assert not (tmp_path / "out" / "smoke").exists()


def test_stages_show_pythons_warnings_but_allennlps_three_import_notices():
    """The PYTHONWARNINGS the stages run under (the script's lines up to its export) hides
    fairscale's and torch.jit's notices only: other warnings, FutureWarnings too, are shown."""
    script = SCRIPT.read_text()
    block = re.search(r"^import_notices=\(.*?^export PYTHONWARNINGS$", script, re.M | re.S)
    assert block, "scripts/gpu_run.sh no longer sets PYTHONWARNINGS for allennlp's notices"
    setting = subprocess.run(
        ["bash", "-c", f'{block[0]}\nprintf %s "$PYTHONWARNINGS"'],
        env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "ignore::" not in setting and setting.count("ignore:") == 3
    code = (
        "import warnings\n"
        "warnings.warn('a recompile', UserWarning)\n"
        "warnings.warn('`torch.jit.script` is deprecated, from elsewhere', FutureWarning)\n"
    )
    stderr = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONWARNINGS": setting},
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    assert len(re.findall(r": (UserWarning|FutureWarning): ", stderr)) == 2


def test_a_machine_without_cuda_ends_the_call_failed_with_the_benchmarks_reason(tmp_path):
    """The GPU call itself (not a dry run) where CUDA is missing: setup recorded, the smoke's
    full-size command parsed and skipped by the benchmark, said so, and the exit status 1."""
    tools, venv = tmp_path / "tools", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\necho 'name'\necho 'no GPU'\n")
    (tools / "nvidia-smi").chmod(0o755)
    (venv / ".ready").touch()  # a warm machine's venv: no install
    environment = forked_python(tmp_path / "python_bin")  # the venv's `python -m`: a warm fork
    python_path = environment["PATH"].removesuffix(os.pathsep + os.environ["PATH"])
    (venv / "bin" / "activate").write_text(f'PATH="{python_path}:$PATH"\n')
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(SCRIPT), "smoke"],
        env={
            **environment,
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "GPU_VENV": str(venv),
            "OUT": str(out),
            "CUDA_VISIBLE_DEVICES": "",
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (out / "gpu.txt").read_text() == "name\nno GPU\n"
    assert '"status": "skipped", "reason": "no CUDA device here' in result.stdout
    assert "== smoke: skipped by the benchmark" in result.stdout
    rows = [line.split("\t") for line in (out / "stages.tsv").read_text().splitlines()[1:]]
    assert [(row[0], row[3]) for row in rows] == [
        ("setup", "ok"),
        ("smoke", "skipped by the benchmark"),
    ]
