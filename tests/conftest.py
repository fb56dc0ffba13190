"""Shared fixtures: tiny corpora and tiny trained archives (made once per session, through the
`allennlp` CLI in this process), one torch thread for every test; the slow tests first. Helpers
live in tests/helpers.py."""

import tempfile
from pathlib import Path

import pytest
import torch
from allennlp.common.plugins import import_plugins

import elmo_plugin  # noqa: F401  (registers every component)
from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    TINY_TAGGER_OVERRIDES,
    TINY_TRANSFORMER_OVERRIDES,
    conllu_head,
    run_allennlp_in_process,
    slow_tests_first,
    train_args,
)

import_plugins()  # allennlp-models too, as every `allennlp` command does (crf_tagger, ...)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """After pytest-randomly's shuffle: the tests marked `slow` first."""
    items[:] = slow_tests_first(items)


@pytest.fixture(scope="session", autouse=True)
def temporary_files_in_the_sessions_folder(tmp_path_factory):
    """The temporary files of this process and of every process a test starts (allennlp's
    extracted archives, a benchmark's scratch folder) go under pytest's folder for the session:
    a process a test kills leaves nothing in the system's temporary folder."""
    folder = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", None)  # read again from TMPDIR
        yield


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny tensors: threads only add overhead (and stall on a shared 2-core machine); the
    setting is restored after each test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    """A small folder of corpus shards cut from the bundled demo corpus (train/*.txt, valid.txt)."""
    folder = tmp_path_factory.mktemp("tiny_corpus")
    lines = (REPO_ROOT / "fixtures/demo_corpus/train/shard_0.txt").read_text().splitlines()
    (folder / "train").mkdir()
    for index in range(3):
        (folder / "train" / f"shard_{index}.txt").write_text(
            "\n".join(lines[index * 100 : (index + 1) * 100]) + "\n"
        )
    (folder / "valid.txt").write_text("\n".join(lines[300:360]) + "\n")
    return folder


def train_tiny_bilm(config: str, sizes: dict, epochs: int, corpus: Path, out: Path) -> Path:
    """`allennlp train CONFIG` (in this process) at tiny `sizes` on the tiny corpus -> its
    model.tar.gz."""
    values = dict(
        sizes,
        train_data_path=str(corpus / "train" / "*.txt"),
        validation_data_path=str(corpus / "valid.txt"),
        **{"trainer.num_epochs": epochs},
    )
    run_allennlp_in_process(train_args(CONFIG_DIR / config, out, values))
    return out / "model.tar.gz"


@pytest.fixture(scope="session")
def tiny_bilm_archive(tiny_corpus, tmp_path_factory) -> Path:
    """A tiny LSTM biLM trained for 2 epochs through `allennlp train` (shared by many tests)."""
    out = tmp_path_factory.mktemp("tiny_bilm") / "model"
    return train_tiny_bilm("elmo_lstm.jsonnet", TINY_LSTM_OVERRIDES, 2, tiny_corpus, out)


@pytest.fixture(scope="session")
def tiny_transformer_archive(tiny_corpus, tmp_path_factory) -> Path:
    """A tiny transformer biLM trained for 1 epoch through `allennlp train`."""
    out = tmp_path_factory.mktemp("tiny_transformer") / "model"
    return train_tiny_bilm(
        "elmo_transformer.jsonnet", TINY_TRANSFORMER_OVERRIDES, 1, tiny_corpus, out
    )


@pytest.fixture
def plugin_cwd(tmp_path) -> Path:
    """A working directory outside the repo with a `.allennlp_plugins` listing elmo_plugin:
    allennlp finds plugin subcommands only through it (or the global plugins file)."""
    (tmp_path / ".allennlp_plugins").write_text("elmo_plugin\n")
    return tmp_path


@pytest.fixture(scope="session")
def tiny_tagged_data(tmp_path_factory) -> Path:
    """train.conllu / valid.conllu: the first 120 / 40 sentences of fixtures/tagged."""
    folder = tmp_path_factory.mktemp("tiny_tagged")
    (folder / "train.conllu").write_text(
        conllu_head(REPO_ROOT / "fixtures/tagged/train.conllu", 120), encoding="utf-8"
    )
    (folder / "valid.conllu").write_text(
        conllu_head(REPO_ROOT / "fixtures/tagged/valid.conllu", 40), encoding="utf-8"
    )
    return folder


@pytest.fixture(scope="session")
def tiny_elmo_tagger_archive(tiny_bilm_archive, tiny_tagged_data, tmp_path_factory) -> Path:
    """pos_tagger_elmo.jsonnet on the tiny tagged data over the tiny biLM, through
    `allennlp train`."""
    out = tmp_path_factory.mktemp("tiny_elmo_tagger") / "model"
    values = dict(
        TINY_TAGGER_OVERRIDES,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
        **{
            "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(
                tiny_bilm_archive
            ),
            "trainer.num_epochs": 6,
            "data_loader.batch_sampler.batch_size": 8,
            "trainer.optimizer.lr": 0.01,
        },
    )
    run_allennlp_in_process(train_args(CONFIG_DIR / "pos_tagger_elmo.jsonnet", out, values))
    return out / "model.tar.gz"
