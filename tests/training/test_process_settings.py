"""Process settings (glibc's heap thresholds, torch's TF32 flags) are set by a command's runner
once, and never by building or running the model: `ProcessSettings.apply`, the
`elmo_process_settings` callback inside a real trainer, the `elmo_evaluator` evaluator, our
predictors, and the deprecated `model.tf32`."""

import json
import logging
import types

import pytest
import torch
from allennlp.common import Params
from allennlp.data import Batch, DatasetReader, Vocabulary
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.evaluation import Evaluator
from allennlp.models import Model
from allennlp.models.archival import load_archive
from allennlp.training import GradientDescentTrainer
from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.models.elmo_bilm import DEPRECATED_TF32
from elmo_plugin.predictors.elmo_embeddings import ElmoEmbeddingsPredictor
from elmo_plugin.training import glibc_heap
from elmo_plugin.training.elmo_evaluator import ElmoEvaluator
from elmo_plugin.training.elmo_process_settings import (
    ElmoProcessSettingsCallback,
    warn_of_changing_shapes,
)
from elmo_plugin.training.process_settings import ProcessSettings
from tests.helpers import CONFIG_DIR, REPO_ROOT, TINY_LSTM_OVERRIDES

HEAP_CALLS = [(-3, 32 << 20), (-1, 1 << 30)]  # M_MMAP_THRESHOLD 32 MiB, then M_TRIM_THRESHOLD 1 GiB
OLD_BILM_ARCHIVE = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"


def tf32_flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture
def process(monkeypatch):
    """glibc's mallopt recorded instead of called (on glibc, no MALLOC_* set), and both TF32
    flags set to False for the test and restored after it -> the recorded (parameter, value)."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(glibc_heap, "is_glibc", lambda: True)
    monkeypatch.setattr(glibc_heap, "mallopt", lambda *call: calls.append(call) or 1)
    for name in glibc_heap.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    saved = tf32_flags()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield calls
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_apply_sets_both_heap_thresholds_and_both_tf32_flags(process, caplog):
    with caplog.at_level(logging.INFO):
        ProcessSettings(keep_freed_heap=True, tf32=True).apply(environ={})
    assert process == HEAP_CALLS
    assert tf32_flags() == (True, True)
    assert [r.getMessage() for r in caplog.records if "process settings" in r.getMessage()] == [
        "process settings: heap kept: mmap threshold 32 MiB, trim threshold 1024 MiB; TF32 on"
    ]


def test_apply_without_the_options_changes_nothing(process):
    ProcessSettings(keep_freed_heap=False, tf32=None).apply(environ={})
    assert process == [] and tf32_flags() == (False, False)


def test_apply_leaves_the_heap_to_glibc_variables_in_the_environment(process):
    ProcessSettings(keep_freed_heap=True, tf32=False).apply(environ={"GLIBC_TUNABLES": "x"})
    assert process == [] and tf32_flags() == (False, False)


def tiny_model_and_instances(tf32=None):
    """A tiny `elmo_lstm.jsonnet` biLM (clipped: the packed CPU LSTM runs) and 16 instances."""
    values = dict(TINY_LSTM_OVERRIDES, **({"model.tf32": tf32} if tf32 is not None else {}))
    params = Params.from_file(str(CONFIG_DIR / "elmo_lstm.jsonnet"), json.dumps(values))
    reader = DatasetReader.from_params(params.pop("dataset_reader"))
    instances = list(reader.read(str(REPO_ROOT / "fixtures/demo_corpus/valid/*.txt")))[:16]
    vocab = Vocabulary.from_instances(instances)
    torch.manual_seed(0)
    return Model.from_params(vocab=vocab, params=params.pop("model")), instances


class RecordAtFirstBatch(TrainerCallback):
    """Records how many mallopt calls and which TF32 flags there were at the first batch."""

    def __init__(self, serialization_dir: str, calls: list) -> None:
        super().__init__(serialization_dir)
        self.calls = calls
        self.seen: list = []  # [mallopt calls, (matmul, cudnn) TF32 flags] at the first batch

    def on_batch(self, trainer, *args, **kwargs) -> None:
        if not self.seen:
            self.seen = [len(self.calls), tf32_flags()]


def test_callback_applies_the_settings_once_in_on_start_before_the_first_batch(
    process, tmp_path, monkeypatch
):
    model, instances = tiny_model_and_instances()
    applied = []
    monkeypatch.setattr(ProcessSettings, "apply", _counting(ProcessSettings.apply, applied))
    callback = ElmoProcessSettingsCallback(str(tmp_path), keep_freed_heap=True, tf32=True)
    recorder = RecordAtFirstBatch(str(tmp_path), process)
    loader = SimpleDataLoader(instances, batch_size=8, vocab=model.vocab)
    trainer = GradientDescentTrainer(
        model,
        torch.optim.Adam(model.parameters(), lr=0.001),
        loader,
        num_epochs=2,
        serialization_dir=str(tmp_path),
        callbacks=[callback, recorder],
    )
    assert process == [] and tf32_flags() == (False, False)  # building: nothing
    trainer.train()
    assert len(applied) == 1  # once, for two epochs of two batches
    assert recorder.seen == [len(HEAP_CALLS), (True, True)]  # already set at the first batch
    assert process == HEAP_CALLS and tf32_flags() == (True, True)


def _counting(apply, applied: list):
    def counted(self, *args, **kwargs):
        applied.append(self)
        return apply(self, *args, **kwargs)

    return counted


def test_building_training_and_embedding_with_the_model_set_nothing(process):
    """The packed CPU LSTM's forward and backward, and embedding without gradients, leave the
    heap and both TF32 flags untouched."""
    model, instances = tiny_model_and_instances()
    batch = Batch(instances)
    batch.index_instances(model.vocab)
    tensors = batch.as_tensor_dict()
    model.train()
    model(**tensors)["loss"].backward()
    model.eval()
    with torch.no_grad():
        layers, _ = model.bilm_encoder()(tensors["source"]["elmo"]["elmo_tokens"])
    assert len(layers) == 3
    assert process == [] and tf32_flags() == (False, False)


def test_model_tf32_is_ignored_with_one_deprecation_line(process, caplog):
    with caplog.at_level(logging.WARNING):
        tiny_model_and_instances(tf32=True)
    deprecations = [r.getMessage() for r in caplog.records if "model.tf32" in r.getMessage()]
    assert deprecations == [DEPRECATED_TF32 % True]
    assert "elmo_process_settings" in deprecations[0] and "--tf32" in deprecations[0]
    assert process == [] and tf32_flags() == (False, False)


def test_elmo_evaluator_applies_the_settings_when_built_from_the_evaluation_key(process):
    evaluator = Evaluator.from_params(
        Params({"type": "elmo_evaluator", "tf32": True, "cuda_device": -1})
    )
    assert isinstance(evaluator, ElmoEvaluator) and evaluator.cuda_device == -1
    assert process == HEAP_CALLS and tf32_flags() == (True, True)


def test_predictor_applies_its_arguments_when_built(process):
    archive = load_archive(str(OLD_BILM_ARCHIVE))
    assert process == []  # loading the archive: nothing
    ElmoEmbeddingsPredictor(archive.model, archive.dataset_reader, keep_freed_heap=False, tf32=True)
    assert process == [] and tf32_flags() == (True, True)
    ElmoEmbeddingsPredictor(archive.model, archive.dataset_reader)  # defaults: heap kept
    assert process == HEAP_CALLS and tf32_flags() == (True, True)


@pytest.mark.parametrize(
    "config",
    sorted(path.name for path in CONFIG_DIR.glob("*.jsonnet")),
)
def test_every_shipped_config_sets_the_same_settings_for_train_and_evaluate(config):
    """Callback 0 is `elmo_process_settings` and `evaluation` is `elmo_evaluator`, both with
    the heap kept (off for the transformer, which has no CPU LSTM) and torch's TF32 defaults."""
    params = Params.from_file(str(CONFIG_DIR / config)).as_dict()
    expected = {"keep_freed_heap": "transformer" not in config, "tf32": None}
    assert params["trainer"]["callbacks"][0] == {"type": "elmo_process_settings", **expected}
    assert params["evaluation"] == {"type": "elmo_evaluator", **expected}


@pytest.mark.parametrize(
    ("device", "fixed_shape", "warned"),
    [("cuda:0", False, True), ("cuda:0", True, False), ("cpu", False, False)],
)
def test_a_gpu_training_on_batches_of_changing_shapes_is_warned_once(
    tiny_corpus, caplog, device, fixed_shape, warned
):
    """allennlp's trainer holds its device as `cuda_device`; the check reads only its type."""
    reader = ElmoCorpusReader(max_sequence_length=10)
    loader = ElmoCorpusLoader(
        reader, str(tiny_corpus / "valid.txt"), batch_size=4, fixed_shape=fixed_shape
    )
    trainer = types.SimpleNamespace(cuda_device=torch.device(device), data_loader=loader)
    with caplog.at_level(logging.WARNING):
        warn_of_changing_shapes(trainer)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == (
        [
            "data_loader elmo_corpus: batches change shape from one to the next (fixed_shape: "
            "false), and each new shape costs the GPU step host time: set "
            "data_loader.fixed_shape to true"
        ]
        if warned
        else []
    )
