"""End to end through the `allennlp` CLI (in this process), tiny sizes: train a biLM (conftest),
export it with `allennlp elmo-export`, train taggers on the export with allennlp's own
`elmo_token_embedder` and with our `elmo_bilm_embedder` (from the files and from the biLM
archive), continue pretraining from the export, then delete every biLM file and use the
downstream archives."""

import json
import os
import shutil
from pathlib import Path
from typing import Optional, cast

import pytest
import torch
from allennlp.data import Instance, Token
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.data.fields import TextField
from allennlp.models.archival import Archive, load_archive
from allennlp.modules.elmo import batch_to_ids
from allennlp.training.util import evaluate

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_vocab_file import published_tokens
from elmo_plugin.elmo_files.softmax import NO_TOKEN_BIAS, read_softmax
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.elmo_files.elmo_reference import (
    TOLERANCE,
    allennlp_elmo,
    allennlp_layers,
    max_diff,
    with_boundaries,
)
from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    TINY_LSTM_OVERRIDES,
    hidden,
    run_allennlp_in_process,
    train_args,
)

TAGGED = REPO_ROOT / "fixtures" / "tagged"
ELMO_DIM = 2 * cast(int, TINY_LSTM_OVERRIDES["model.contextualizer.input_dim"])


def tagger_config(embedder: dict, indexer: dict) -> dict:
    """allennlp's simple_tagger on word###TAG files (allennlp's sequence_tagging reader), with
    ELMo as the only input and ELMo's L2 penalty on the layer-mix weights s."""
    return {
        "dataset_reader": {"type": "sequence_tagging", "token_indexers": {"elmo": indexer}},
        "train_data_path": str(TAGGED / "train_word_tag.txt"),
        "validation_data_path": str(TAGGED / "valid_word_tag.txt"),
        "model": {
            "type": "simple_tagger",
            "text_field_embedder": {"token_embedders": {"elmo": embedder}},
            "encoder": {
                "type": "lstm",
                "input_size": ELMO_DIM,
                "hidden_size": 16,
                "bidirectional": True,
            },
            "regularizer": {
                "regexes": [["scalar_mix.*scalar_parameters", {"type": "l2", "alpha": 0.001}]]
            },
        },
        "data_loader": {"batch_size": 8, "shuffle": True},
        "trainer": {"num_epochs": 6, "optimizer": {"type": "adam", "lr": 0.01}, "cuda_device": -1},
    }


def train(config, out: Path, values: Optional[dict] = None) -> Path:
    run_allennlp_in_process(train_args(config, out, values or {}))
    return out


@pytest.fixture(scope="module")
def runs(tiny_bilm_archive, tiny_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("elmo_files_cli")
    bilm = root / "bilm" / "model.tar.gz"  # a copy we may delete (the conftest one is shared)
    bilm.parent.mkdir()
    shutil.copy(tiny_bilm_archive, bilm)
    files = root / "demo_output" / "elmo"
    files.parent.mkdir()  # elmo-export creates OUT_DIR, never its parents
    run_allennlp_in_process(["elmo-export", str(bilm), str(files)])

    configs = {
        "allennlp_embedder": tagger_config(
            {
                "type": "elmo_token_embedder",
                "options_file": str(files / "options.json"),
                "weight_file": str(files / "weights.hdf5"),
                "dropout": 0.0,
            },
            {"type": "elmo_characters"},
        ),
        "ours_from_files": tagger_config(
            {"type": "elmo_bilm_embedder", "pretrained_file": str(files), "dropout": 0.0},
            {"type": "elmo_char_ids"},
        ),
        "ours_from_archive": tagger_config(
            {"type": "elmo_bilm_embedder", "pretrained_file": str(bilm), "dropout": 0.0},
            {"type": "elmo_char_ids"},
        ),
    }
    jobs = {}
    for name, config in configs.items():
        (root / f"{name}.json").write_text(json.dumps(config))
        jobs[name] = (root / f"{name}.json", root / name)
    jobs["continued"] = (
        CONFIG_DIR / "elmo_lstm_continue.jsonnet",
        root / "continued",
        dict(
            TINY_LSTM_OVERRIDES,
            train_data_path=str(tiny_corpus / "train" / "shard_0.txt"),
            validation_data_path=str(tiny_corpus / "valid.txt"),
            **{
                "model.pretrained_file": str(files),
                "vocabulary": {
                    "type": "elmo_tokens_file",
                    "tokens_file": str(files / "vocab.txt"),
                },
                "trainer.num_epochs": 1,
                "trainer.optimizer.lr": 0.0,  # nothing changes: validation = the imported model
            },
        ),
    )
    outputs = {name: train(*job) for name, job in jobs.items()}
    return {
        "root": root,
        "bilm": bilm,
        "files": files,
        "original_bilm": tiny_bilm_archive,
        **outputs,
    }


def test_export_writes_the_four_files_and_allennlp_elmo_reproduces_the_model(runs, tiny_corpus):
    files = runs["files"]
    assert sorted(os.listdir(files)) == [
        "options.json",
        "softmax.hdf5",
        "vocab.txt",
        "weights.hdf5",
    ]
    model = load_archive(str(runs["bilm"])).model.eval()
    vocab_lines = (files / "vocab.txt").read_text().splitlines()
    assert vocab_lines == published_tokens(
        [model.vocab.get_token_from_index(i) for i in range(1, model.vocab.get_vocab_size())]
    )
    assert "<UNK>" in vocab_lines  # the published name, which bilm-tf's training requires
    weight, _ = read_softmax(str(files / "softmax.hdf5"), len(vocab_lines), 16)
    model_weight, _ = model.softmax_matrices()
    assert torch.equal(torch.from_numpy(weight), model_weight[: len(vocab_lines)].detach())
    elmo = allennlp_elmo(str(files / "options.json"), str(files / "weights.hdf5"))
    lines = [
        line.split()
        for line in (tiny_corpus / "valid.txt").read_text().splitlines()
        if line.strip()
    ]
    for batch in (lines[:1], lines[1:5], lines[5:21]):
        char_ids = batch_to_ids(batch)
        theirs, _ = allennlp_layers(elmo, char_ids)
        with torch.no_grad():
            ours, _ = model.bilm_encoder()(with_boundaries(char_ids))
        assert max_diff(ours, theirs) <= TOLERANCE


def test_our_embedder_from_archive_equals_from_exported_files(runs, tiny_corpus):
    from allennlp.data import Vocabulary

    lines = [line.split() for line in (tiny_corpus / "valid.txt").read_text().splitlines()[:12]]
    char_ids = batch_to_ids(lines)
    outputs = []
    for source in (runs["bilm"], runs["files"]):
        embedder = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(source), dropout=0.0).eval()
        with torch.no_grad():
            outputs.append(embedder(char_ids))
    assert max_diff([outputs[0]], [outputs[1]]) <= TOLERANCE


def test_taggers_train_on_the_export(runs):
    tags = [
        item.rsplit("###", 1)[1]
        for line in (TAGGED / "valid_word_tag.txt").read_text().splitlines()
        for item in line.split()
    ]
    majority = max(tags.count(tag) for tag in set(tags)) / len(tags)
    for name in ("allennlp_embedder", "ours_from_files", "ours_from_archive"):
        metrics = json.loads((runs[name] / "metrics.json").read_text())
        # well above always guessing the most frequent tag: the ELMo features carry the tags
        assert metrics["best_validation_accuracy"] > majority + 0.25, (name, majority, metrics)
        if name != "allennlp_embedder":  # the L2 penalty on s is active (s moved away from 0)
            assert metrics["training_reg_loss"] > 0.0


def test_an_archive_without_a_biLM_is_refused(runs, tmp_path):
    from allennlp.common.checks import ConfigurationError
    from allennlp.data import Vocabulary

    from elmo_plugin.commands.elmo_export import export_archive

    tagger = runs["ours_from_files"] / "model.tar.gz"
    with pytest.raises(ConfigurationError, match="holds a SimpleTagger model, not an ELMo biLM"):
        export_archive(str(tagger), str(tmp_path / "out"))
    with pytest.raises(ConfigurationError, match="holds a 'simple_tagger' model, not an ELMo biLM"):
        ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tagger))


def evaluate_archive(archive: Archive, data: Path) -> dict:
    """allennlp's `evaluate` of the loaded archive's model on `data`, read by its validation
    reader."""
    loader = MultiProcessDataLoader(archive.validation_dataset_reader, str(data), batch_size=16)
    loader.index_with(archive.model.vocab)
    return evaluate(archive.model, loader, cuda_device=-1)


def test_downstream_archives_are_self_contained(runs):
    """With the biLM archive and the exported files gone, our taggers' archives still load,
    evaluate to the accuracy recorded during training, and predict."""
    with hidden(runs["files"], runs["bilm"].parent):
        for name in ("ours_from_files", "ours_from_archive"):
            check_self_contained(runs[name])


def check_self_contained(run: Path) -> None:
    """The run's archive evaluates to its recorded accuracy and tags a sentence."""
    archive = load_archive(str(run / "model.tar.gz"))
    model, metrics = archive.model, evaluate_archive(archive, TAGGED / "valid_word_tag.txt")
    recorded = json.loads((run / "metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(recorded["best_validation_accuracy"], abs=1e-9)
    tokens = [Token(t) for t in "The file is open .".split()]
    instance = Instance({"tokens": TextField(tokens, {"elmo": ElmoCharIdsIndexer()})})
    tags = model.forward_on_instance(instance)["tags"]
    assert len(tags) == 5 and set(tags) <= set(model.vocab.get_token_to_index_vocabulary("labels"))


def test_continued_pretraining_starts_from_the_imported_model(runs, tiny_corpus):
    """With lr 0, the continued run's validation perplexity is the exported model's: the original
    archive evaluated with its softmax restricted to the exported rows (the row allennlp's
    LanguageModel allocates past the vocabulary, which no token uses, is not exported)."""
    continued = json.loads((runs["continued"] / "metrics.json").read_text())
    archive = load_archive(str(runs["original_bilm"]))
    model = archive.model.eval()
    with torch.no_grad():
        model.softmax_matrices()[1][model.vocab.get_vocab_size() - 1 :] = NO_TOKEN_BIAS
    expected = evaluate_archive(archive, tiny_corpus / "valid.txt")
    for name in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert continued[f"best_validation_{name}"] == pytest.approx(expected[name], rel=1e-5)
    assert (
        continued["best_validation_perplexity"] < model.vocab.get_vocab_size() / 2
    )  # trained, not uniform
