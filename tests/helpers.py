"""Test helpers (imported by test modules; conftest.py holds only fixtures): repo paths, the real
data location, a runner for the real `allennlp` CLI, tiny config sizes."""
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List, Optional

import pytest

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


def run_allennlp(
    args: List[str], cwd: Optional[Path] = None, timeout: int = 600, check: bool = True
) -> subprocess.CompletedProcess:
    """Runs `allennlp ARGS --include-package elmo_plugin`; fails the test with its output on error
    (with `check`; otherwise returns the failed result too)."""
    command = [ALLENNLP, *args, "--include-package", "elmo_plugin"]
    env = dict(os.environ, PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    # Tiny models gain nothing from threads, and spinning OpenMP threads on shared cores slow
    # them down by 10x and more (measured: 60 s vs 0.9 s per tagger epoch under load).
    env.setdefault("OMP_NUM_THREADS", "1")
    result = subprocess.run(command, cwd=cwd or REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}")
    return result


def overrides(values: Dict) -> str:
    return json.dumps(values)


# Tiny sizes for CLI tests: same architecture as the demo, seconds per epoch.
TINY_INPUT_OVERRIDES = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 8], [2, 8], [3, 16]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 16,
    "model.contextualizer.input_dim": 16,
    "data_loader.batch_sampler.batch_size": 16,
}

TINY_LSTM_OVERRIDES = {**TINY_INPUT_OVERRIDES, "model.contextualizer.cell_size": 32}

TINY_TRANSFORMER_OVERRIDES = {
    **TINY_INPUT_OVERRIDES,
    "model.contextualizer.feedforward_hidden_dim": 32,
    "model.contextualizer.num_attention_heads": 2,
}


def conllu_head(path: Path, sentences: int) -> str:
    return "".join(block.strip("\n") + "\n\n" for block in path.read_text(encoding="utf-8").split("\n\n")[:sentences])


# pos_tagger_elmo.jsonnet with the tiny biLM: ELMo width 2 x 16, + the 32-wide word embedding.
TINY_TAGGER_OVERRIDES = {"model.encoder.input_size": 2 * 16 + 32, "model.encoder.hidden_size": 32}


def copy_archive_with(source: Path, target: Path, extra: Optional[tarfile.TarInfo] = None, drop: str = "") -> Path:
    """A copy of the tar archive `source` without the member named `drop`, plus `extra` (a
    regular file's TarInfo gets `size` bytes of "x"); how the tests craft hostile archives."""
    with tarfile.open(source) as original, tarfile.open(target, "w:gz") as copy:
        for member in original.getmembers():
            if member.name != drop:
                copy.addfile(member, original.extractfile(member) if member.isfile() else None)
        if extra is not None:
            copy.addfile(extra, io.BytesIO(b"x" * extra.size) if extra.isfile() else None)
    return target


def tar_member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, size
    return info
