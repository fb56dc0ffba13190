"""elmo_plugin raises no Python warnings of its own: in a fresh process, after allennlp and
allennlp-models have imported themselves (their notices, fairscale's among them, are theirs),
every warning becomes an error while elmo_plugin is imported, trains a tiny biLM for a step,
embeds with `elmo_bilm_embedder` and applies the process settings."""

import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT

SCRIPT = """
import json
import warnings

import allennlp.commands  # allennlp's own imports (fairscale's FutureWarnings) come first
import allennlp_models.lm  # noqa: F401  (what elmo_bilm subclasses)
import torch

warnings.simplefilter("error")

import elmo_plugin  # noqa: F401
from allennlp.common import Params
from allennlp.data import Batch, DatasetReader, Vocabulary
from allennlp.models import Model

from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from elmo_plugin.training.process_settings import ProcessSettings
from tests.helpers import CONFIG_DIR, REPO_ROOT, TINY_LSTM_OVERRIDES

torch.set_num_threads(1)
ProcessSettings(keep_freed_heap=True, tf32=True).apply()
params = Params.from_file(str(CONFIG_DIR / "elmo_lstm.jsonnet"), json.dumps(TINY_LSTM_OVERRIDES))
reader = DatasetReader.from_params(params.pop("dataset_reader"))
instances = list(reader.read(str(REPO_ROOT / "fixtures/demo_corpus/valid/*.txt")))[:8]
vocab = Vocabulary.from_instances(instances)
model = Model.from_params(vocab=vocab, params=params.pop("model"))
batch = Batch(instances)
batch.index_instances(vocab)
tensors = batch.as_tensor_dict()
model.train()
model(**tensors)["loss"].backward()  # the packed CPU LSTM, forward and backward
archive = REPO_ROOT / "fixtures/archives_before_layering/bilm_lstm.tar.gz"
embedder = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(archive))
vectors = embedder(tensors["source"]["elmo"]["elmo_tokens"])
print("shape", tuple(vectors.shape))
"""


@pytest.mark.slow
def test_import_train_step_embed_and_process_settings_raise_no_warning():
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.splitlines()[-1] == "shape (8, 22, 32)"  # (sentences, tokens, 2 x 16)
