"""The replay contract of `elmo_graph_step`, checked on the CPU for every shipped config: a
step captured in a CUDA graph reads, at every replay, the memory its capture read. So state that
crosses training steps must be updated in place: a tensor that one step rebinds (stores a new
tensor where the model, optimizer, metrics or trainer keep it) and the next step reads is read at
its old, freed address by every replay. The CPU stand-in for the graph runs the Python of every
step again and cannot show this; this test looks for it directly."""

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from allennlp.commands.train import TrainModel
from allennlp.common import Params
from allennlp.data import DataLoader, DatasetReader, Vocabulary
from allennlp.data.data_loaders import SimpleDataLoader
from allennlp.models import Model
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks.step_audit import SHRUNK, SHRUNK_CONTEXTUALIZER, AuditedStep
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.training.elmo_graph_step import ElmoGraphStepTrainer
from tests.elmo_files.manylangs_reference import MAX_CHARS, make_manylangs_folder
from tests.helpers import CONFIG_DIR, TINY_TAGGER_OVERRIDES

# What holds data, not step state: not walked.
NOT_STATE = (DataLoader, DatasetReader, Vocabulary)
# Every shipped pretraining config, at the shrunk sizes of the step audit.
LSTM = {**SHRUNK, **SHRUNK_CONTEXTUALIZER["lstm"]}
TRANSFORMER = {**SHRUNK, **SHRUNK_CONTEXTUALIZER["transformer"]}
WITHOUT_PRETRAINED = {"model.pretrained_file": None}
MANYLANGS = "elmo_manylangs_continue.jsonnet"
CONFIGS = {
    "elmo_lstm.jsonnet": LSTM,
    "elmo_lstm_stateful.jsonnet": LSTM,
    "elmo_lstm_continue.jsonnet": {**LSTM, **WITHOUT_PRETRAINED},
    "elmo_lstm_small.jsonnet": LSTM,
    "elmo_lstm_medium.jsonnet": LSTM,
    "elmo_lstm_original.jsonnet": LSTM,
    "elmo_lstm_original_stateful.jsonnet": LSTM,
    "elmo_transformer.jsonnet": TRANSFORMER,
    "elmo_transformer_original.jsonnet": TRANSFORMER,
}


def key_name(key: Any, names: dict[int, str]) -> str:
    """A dict key in a path: a parameter (an optimizer's state) by its name in the model."""
    return names.get(id(key), f"tensor {tuple(key.shape)}") if torch.is_tensor(key) else repr(key)


def reachable_tensors(trainer: ElmoGraphStepTrainer) -> dict[str, torch.Tensor]:
    """Every tensor reachable from the trainer through attributes, dicts, lists and tuples (the
    model's parameters, buffers and plain attributes, the optimizer's state and groups, the
    metrics' totals, ...), by the path that reaches it first."""
    names = {id(parameter): name for name, parameter in trainer.model.named_parameters()}
    found: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", trainer)]
    while stack:
        path, value = stack.pop()
        if id(value) in seen or isinstance(value, NOT_STATE):
            continue
        seen.add(id(value))
        if torch.is_tensor(value):
            found[path] = value
        elif isinstance(value, dict):
            stack.extend((f"{path}[{key_name(k, names)}]", item) for k, item in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{index}]", item) for index, item in enumerate(value))
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            stack.extend((f"{path}.{name}", item) for name, item in vars(value).items())
    return found


class StoragesRead(TorchDispatchMode):
    """Records the storage of every dense tensor that an aten op takes."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for leaf in tree_leaves([list(args), kwargs or {}]):
            if torch.is_tensor(leaf) and leaf.layout == torch.strided:
                self.storages.add(leaf.untyped_storage().data_ptr())
        return func(*args, **(kwargs or {}))


def rebound_then_read(trainer: ElmoGraphStepTrainer, batches: Iterator[dict]) -> list[str]:
    """Three steps as `elmo_graph_step` captures them (`_step`): a warm-up, then the step a GPU
    would capture, then one it would replay -> the paths of the tensors that the second step
    rebound and the third read (what a replay would read from freed memory)."""
    trainer._step(next(batches))
    before = {path: id(tensor) for path, tensor in reachable_tensors(trainer).items()}
    trainer._step(next(batches))
    rebound = {
        path: tensor
        for path, tensor in reachable_tensors(trainer).items()
        if before.get(path) != id(tensor) and tensor.layout == torch.strided
    }
    with StoragesRead() as reads:
        trainer._step(next(batches))
    return sorted(p for p, t in rebound.items() if t.untyped_storage().data_ptr() in reads.storages)


@pytest.fixture(autouse=True)
def on_the_gpu_path():
    """On the paths a GPU runs: the LSTM's whole-sequence function, the character CNN's fixed
    shapes."""
    with gpu_path_on_cpu():
        yield


def graph_step_trainer(run: AuditedStep, folder) -> ElmoGraphStepTrainer:
    return ElmoGraphStepTrainer(
        run.model,
        run.optimizer,
        run.loader,
        serialization_dir=str(folder),
        grad_norm=run.grad_norm,
        cuda_device=-1,
    )


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_no_tensor_one_step_rebinds_is_read_by_the_next(config, tmp_path):
    run = AuditedStep(config, CONFIGS[config])
    torch.manual_seed(0)
    assert rebound_then_read(graph_step_trainer(run, tmp_path), run.batches) == []


def test_an_elmo_for_many_langs_model_continued_keeps_the_contract(tmp_path):
    folder = make_manylangs_folder(tmp_path / "manylangs")
    elmo = "model.text_field_embedder.token_embedders.elmo."
    values = {
        "vocabulary.model_folder": str(folder),
        "model.pretrained_file": str(folder),
        "dataset_reader.token_indexers.elmo.max_characters_per_token": MAX_CHARS,
        elmo + "max_characters_per_token": MAX_CHARS,
        elmo + "char_dim": 5,
        elmo + "filters": [[1, 4], [2, 4], [3, 8]],
        elmo + "projection_dim": 8,
        elmo + "word_dim": 6,
        elmo + "activation": "tanh",
        "model.contextualizer.input_dim": 8,
        "model.contextualizer.cell_size": 16,
        "data_loader.batch_sampler.batch_size": 8,
    }
    run = AuditedStep(MANYLANGS, values)
    assert rebound_then_read(graph_step_trainer(run, tmp_path), run.batches) == []


def test_every_shipped_config_is_checked():
    shipped = {path.name for path in CONFIG_DIR.glob("*.jsonnet")}
    assert shipped == {*CONFIGS, MANYLANGS, *downstream_sizes("")}


class Rebinding(torch.nn.Module):
    """A running total kept by rebinding (`self.total = self.total + x`), read by the next
    step: what the contract forbids."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.total = torch.zeros(3)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.total = self.total + x.detach()
        return {"loss": (self.weight * (x + self.total)).sum()}


class InPlace(Rebinding):
    """The same total, added in place: allowed."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.total.add_(x.detach())
        return {"loss": (self.weight * (x + self.total)).sum()}


@pytest.mark.parametrize("module, found", [(Rebinding, [".total"]), (InPlace, [])])
def test_the_check_finds_a_rebound_total_and_passes_one_updated_in_place(module, found, tmp_path):
    class Wrapped(Model):
        def __init__(self) -> None:
            super().__init__(Vocabulary())
            self.inner = module()

        def forward(self, x):  # type: ignore[override]
            return self.inner(x)

    model = Wrapped()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = ElmoGraphStepTrainer(
        model, optimizer, SimpleDataLoader([], 1), serialization_dir=str(tmp_path), cuda_device=-1
    )
    batches = iter([{"x": torch.full((3,), float(k))} for k in range(3)])
    paths = rebound_then_read(trainer, batches)
    assert [path[path.rindex(".") :] for path in paths] == found


def downstream_trainer(config: str, values: dict, folder) -> ElmoGraphStepTrainer:
    """`config` as `allennlp train` builds it, with the `elmo_graph_step` trainer."""
    overrides = json.dumps({**values, "trainer.type": "elmo_graph_step"})
    params = Params.from_file(str(CONFIG_DIR / config), overrides)
    params.pop("evaluation", None)  # `allennlp evaluate`'s, not the training's
    folder.mkdir()
    trainer = TrainModel.from_params(params=params, serialization_dir=str(folder), local_rank=0)
    assert isinstance(trainer.trainer, ElmoGraphStepTrainer)
    return trainer.trainer


def downstream_sizes(archive: str) -> dict[str, dict]:
    """The downstream configs at the tiny biLM's widths (its layers 2 x 16, words 32)."""
    elmo = {"model.text_field_embedder.token_embedders.elmo.pretrained_file": archive}
    return {
        "pos_tagger_baseline.jsonnet": {},
        "pos_tagger_elmo.jsonnet": {**elmo, **TINY_TAGGER_OVERRIDES},
        "dependency_parser_elmo.jsonnet": {
            **elmo,
            "model.encoder.input_size": 2 * 16 + 32 + 16,
            "model.encoder.hidden_size": 32,
            "model.arc_representation_dim": 32,
            "model.tag_representation_dim": 16,
        },
        "classifier_elmo.jsonnet": {
            **elmo,
            "model.seq2vec_encoder.input_size": 2 * 16 + 32,
            "model.seq2vec_encoder.hidden_size": 32,
        },
    }


@pytest.mark.parametrize("config", sorted(downstream_sizes("")))
def test_no_downstream_step_reads_what_the_step_before_rebound(config, tiny_bilm_archive, tmp_path):
    """allennlp-models' taggers, parser and classifier over the tiny biLM. (Their metrics read
    every batch on the host, which a CUDA graph cannot capture: `elmo_graph_step` then trains
    them eagerly, with one warning.)"""
    values = downstream_sizes(str(tiny_bilm_archive))[config]
    trainer = downstream_trainer(config, values, tmp_path / "run")
    assert rebound_then_read(trainer, iter(trainer.data_loader)) == []
