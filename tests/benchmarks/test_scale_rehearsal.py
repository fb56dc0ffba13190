"""benchmarks/scale_rehearsal.py end to end at tiny sizes (the corpus and its 793,471-line
tokens.txt are real, the model shrunk): corpus -> elmo-vocab -> train, kill -9 at a checkpoint,
-r, evaluate (one process; two are killed and resumed in tests/cli/test_exact_resume_cli.py and
in benchmarks/multi_node.py's one-host stage) -> the 793k vs 50k step-time ratio. `python -m
benchmarks.scale_rehearsal` is a process forked from the tests' warm server (`run_forked`); the
`allennlp` commands it runs are processes of their own, forks of that server too (its
ELMO_BENCHMARKS_ALLENNLP: the server's client)."""

import json
import math
import os

import pytest

from benchmarks.support.common import ALLENNLP_ENV
from tests.helpers import REPO_ROOT, TINY_CHAR_CNN_OVERRIDES, forked_allennlp_script, run_forked

TINY = {
    **TINY_CHAR_CNN_OVERRIDES,
    # the softmax's 793,471 rows 8 wide (its cost: every step's, the validation's, the checkpoints')
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 8,
    "model.contextualizer.input_dim": 8,
    "model.num_samples": 64,
    "data_loader.batch_size": 16,
}


@pytest.mark.slow
def test_rehearsal_kills_resumes_and_evaluates_then_times_both_vocabularies(tmp_path):
    command = [
        "-m",
        "benchmarks.scale_rehearsal",
        "--tokens",
        "60000",
        "--shards",
        "3",
        "--train-tokens",
        "6000",
        "--heldout-tokens",
        "60",
        "--processes",
        "1",
        "--cell-size",
        "32",
        "--workdir",
        str(tmp_path),
        "--model-overrides",
        json.dumps(TINY),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    (tmp_path / "bin").mkdir()
    env[ALLENNLP_ENV] = str(forked_allennlp_script(tmp_path / "bin"))  # warm `allennlp` children
    result = run_forked(command, REPO_ROOT, env, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    stages = {stage["stage"]: stage for stage in summary["stages"]}
    assert len(list((tmp_path / "corpus" / "train").iterdir())) == 3
    assert sum(1 for _ in open(tmp_path / "corpus" / "tokens.txt", encoding="utf-8")) == 793_471
    stage = stages["train_1proc"]
    assert "train_2proc" not in stages
    assert stage["killed_after_batch"] > 0 and stage["checkpoint_mib"] > 0
    assert (tmp_path / "train_1proc" / "model.tar.gz").is_file() and math.isfinite(
        stage["heldout_perplexity"]
    )
    assert summary["step_time_ratio_793k_vs_50k"] > 0


def test_a_bare_processes_option_runs_only_the_timing_epochs_after_the_corpus_and_vocabulary(
    tmp_path,
):
    """`--processes` with no values: no kill/resume runs, still the corpus, elmo-vocab and the
    793k and 50k timing epochs (checked on the commands of a dry run)."""
    command = [
        "-m",
        "benchmarks.scale_rehearsal",
        "--dry-run",
        "--processes",
        "--workdir",
        str(tmp_path),
    ]
    result = run_forked(command, REPO_ROOT, dict(os.environ, PYTHONWARNINGS="ignore"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    commands = [line for line in result.stdout.splitlines() if line.startswith("$ ")]
    assert any("make_scale_corpus.py" in line for line in commands)
    assert any(" elmo-vocab " in line for line in commands)
    trained = [line.split(" -s ")[1].split()[0] for line in commands if " train " in line]
    assert trained == [
        str(tmp_path.resolve() / "epoch_vocab_793k"),
        str(tmp_path.resolve() / "epoch_vocab_50k"),
    ]
    assert not any(" evaluate " in line or line.endswith(" -r") for line in commands)
