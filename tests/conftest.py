"""Shared test fixtures: repo paths, real data location, and a runner for the real `allennlp` CLI."""
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

import elmo_plugin  # noqa: F401  (registers every component)

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "training_config"
ALLENNLP = str(Path(sys.executable).parent / "allennlp")


def shared_data_dir() -> Path:
    """Real corpora: $ELMO_PLUGIN_DATA, default ../shared/data beside the repo."""
    return Path(os.environ.get("ELMO_PLUGIN_DATA", REPO_ROOT.parent / "shared" / "data"))


def require_shared_file(relative: str) -> Path:
    path = shared_data_dir() / relative
    if not path.is_file():
        pytest.skip(f"real data not found: {path} (set ELMO_PLUGIN_DATA to the shared data folder)")
    return path


def run_allennlp(args: List[str], cwd: Optional[Path] = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Runs `allennlp ARGS --include-package elmo_plugin`; fails the test with its output on error."""
    command = [ALLENNLP, *args, "--include-package", "elmo_plugin"]
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(command, cwd=cwd or REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    return result


def overrides(values: Dict) -> str:
    return json.dumps(values)


# Tiny sizes for CLI tests: same architecture as the demo, seconds per epoch.
TINY_LSTM_OVERRIDES = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 8], [2, 8], [3, 16]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
    "model.contextualizer.input_dim": 16,
    "model.contextualizer.hidden_dim": 32,
    "data_loader.batch_sampler.batch_size": 16,
}


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A small folder of corpus shards cut from the bundled demo corpus (train/*.txt, valid.txt)."""
    folder = tmp_path_factory.mktemp("tiny_corpus")
    lines = (REPO_ROOT / "fixtures/demo_corpus/train/shard_0.txt").read_text().splitlines()
    (folder / "train").mkdir()
    for index in range(3):
        (folder / "train" / f"shard_{index}.txt").write_text("\n".join(lines[index * 100 : (index + 1) * 100]) + "\n")
    (folder / "valid.txt").write_text("\n".join(lines[300:360]) + "\n")
    return folder


@pytest.fixture(scope="session")
def tiny_bilm_archive(tiny_corpus, tmp_path_factory) -> Path:
    """A tiny LSTM biLM trained for 2 epochs through `allennlp train` (shared by many tests)."""
    out = tmp_path_factory.mktemp("tiny_bilm") / "model"
    values = dict(
        TINY_LSTM_OVERRIDES,
        train_data_path=str(tiny_corpus / "train" / "*.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **{"trainer.num_epochs": 2},
    )
    run_allennlp(["train", str(CONFIG_DIR / "elmo_lstm.jsonnet"), "-s", str(out), "-o", overrides(values)])
    return out / "model.tar.gz"
