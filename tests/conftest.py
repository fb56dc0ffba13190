"""Shared test fixtures: repo paths, real data location, and a runner for the real `allennlp` CLI."""
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from allennlp.common.plugins import import_plugins

import elmo_plugin  # noqa: F401  (registers every component)

import_plugins()  # allennlp-models too, as every `allennlp` command does (crf_tagger, ...)

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
    # Tiny models gain nothing from threads, and spinning OpenMP threads on shared cores slow
    # them down by 10x and more (measured: 60 s vs 0.9 s per tagger epoch under load).
    env.setdefault("OMP_NUM_THREADS", "1")
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

TINY_TRANSFORMER_OVERRIDES = {
    **TINY_LSTM_OVERRIDES,
    "model.contextualizer.num_attention_heads": 2,
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


@pytest.fixture
def plugin_cwd(tmp_path) -> Path:
    """A working directory outside the repo with a `.allennlp_plugins` listing elmo_plugin:
    allennlp finds plugin subcommands only through it (or the global plugins file)."""
    (tmp_path / ".allennlp_plugins").write_text("elmo_plugin\n")
    return tmp_path


def conllu_head(path: Path, sentences: int) -> str:
    return "".join(block.strip("\n") + "\n\n" for block in path.read_text(encoding="utf-8").split("\n\n")[:sentences])


@pytest.fixture(scope="session")
def tiny_tagged_data(tmp_path_factory) -> Path:
    """train.conllu / valid.conllu: the first 120 / 40 sentences of fixtures/tagged."""
    folder = tmp_path_factory.mktemp("tiny_tagged")
    (folder / "train.conllu").write_text(conllu_head(REPO_ROOT / "fixtures/tagged/train.conllu", 120), encoding="utf-8")
    (folder / "valid.conllu").write_text(conllu_head(REPO_ROOT / "fixtures/tagged/valid.conllu", 40), encoding="utf-8")
    return folder


# pos_tagger_elmo.jsonnet with the tiny biLM: ELMo width 2 x 16, + the 32-wide word embedding.
TINY_TAGGER_OVERRIDES = {"model.encoder.input_size": 2 * 16 + 32, "model.encoder.hidden_size": 32}


@pytest.fixture(scope="session")
def tiny_elmo_tagger_archive(tiny_bilm_archive, tiny_tagged_data, tmp_path_factory) -> Path:
    """pos_tagger_elmo.jsonnet on the tiny tagged data over the tiny biLM, through `allennlp train`."""
    out = tmp_path_factory.mktemp("tiny_elmo_tagger") / "model"
    values = dict(
        TINY_TAGGER_OVERRIDES,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
        **{
            "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(tiny_bilm_archive),
            "trainer.num_epochs": 6,
            "data_loader.batch_sampler.batch_size": 8,
            "trainer.optimizer.lr": 0.01,
        },
    )
    run_allennlp(["train", str(CONFIG_DIR / "pos_tagger_elmo.jsonnet"), "-s", str(out), "-o", overrides(values)])
    return out / "model.tar.gz"
