"""ELMoForManyLangs models through the `allennlp` CLI (in this process; a refusal in a process of
its own): a tagger trained on one, `elmo-embed`."""

import json
from pathlib import Path

import h5py
import numpy
import pytest
from allennlp.data import Vocabulary
from allennlp.models.archival import load_archive

from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.elmo_files.manylangs_reference import MAX_CHARS, make_manylangs_folder, reference_layers
from tests.elmo_files.test_manylangs import assert_same_layers, our_layers
from tests.helpers import (
    CONFIG_DIR,
    evaluation,
    hidden,
    predictions,
    run_allennlp,
    run_allennlp_in_process,
    train_args,
)

# Whitespace-tokenizable text (no U+3000 inside a token): non-ASCII, missing characters and
# words, a token longer than the character limit.
LINES = ["the cat sat on the mat", "über 中文 日本語 ßz xyz", "a" * 30 + " the cat" + "b" * 20, "é"]


def embedded(model, folder: Path, *options: str) -> list[numpy.ndarray]:
    """`allennlp elmo-embed MODEL` of LINES (in FOLDER/input.txt) -> each line's layers."""
    (folder / "input.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["elmo-embed", str(model), str(folder / "input.txt"), str(folder / "out.hdf5")]
    run_allennlp_in_process([*args, *options])
    with h5py.File(folder / "out.hdf5", "r") as output:
        return [numpy.array(output[str(index)]) for index in range(len(LINES))]


def test_tagger_on_manylangs_elmo_trains_and_its_archive_stands_alone(
    tmp_path, tiny_tagged_data, plugin_cwd
):
    folder = make_manylangs_folder(tmp_path / "manylangs")
    values = {
        "train_data_path": str(tiny_tagged_data / "train.conllu"),
        "validation_data_path": str(tiny_tagged_data / "valid.conllu"),
        "dataset_reader.token_indexers.elmo": {
            "type": "elmo_manylangs_ids",
            "max_characters_per_token": MAX_CHARS,
        },
        "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(folder),
        "model.encoder.input_size": 2 * 8 + 32,
        "model.encoder.hidden_size": 32,
        "trainer.num_epochs": 4,
        "data_loader.batch_sampler.batch_size": 8,
        "trainer.optimizer.lr": 0.01,
    }
    run_allennlp_in_process(
        train_args(CONFIG_DIR / "pos_tagger_elmo.jsonnet", "out", values), cwd=plugin_cwd
    )
    archive = plugin_cwd / "out" / "model.tar.gz"
    metrics = json.loads((plugin_cwd / "out" / "metrics.json").read_text())
    assert metrics["best_validation_accuracy"] > 0.8
    sentences = [line.split() for line in LINES]
    expected = reference_layers(folder, sentences)
    with hidden(folder):  # the archive needs neither the weights nor the dictionaries
        valid = tiny_tagged_data / "valid.conllu"
        evaluated = evaluation(archive, valid, plugin_cwd / "m.json", cwd=plugin_cwd)
        loaded = load_archive(str(archive)).model
        elmo = loaded.text_field_embedder._token_embedders["elmo"]
        assert_same_layers(our_layers(elmo, loaded.vocab, sentences), expected)
    assert evaluated["accuracy"] == pytest.approx(metrics["best_validation_accuracy"], abs=1e-6)


@pytest.mark.parametrize("word_dim", [6, 0], ids=["with_word_embedding", "characters_only"])
def test_elmo_embed_of_manylangs_folder_equals_its_embedder(tmp_path, word_dim):
    folder = make_manylangs_folder(tmp_path / "manylangs", word_dim=word_dim)
    ours = embedded(folder, tmp_path, "--batch-size", "2")
    assert_same_layers(ours, reference_layers(folder, [line.split() for line in LINES]))


def test_elmo_embed_refuses_a_folder_of_no_known_kind_in_one_line(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "char.dic").write_text("a\t0\n")
    (tmp_path / "input.txt").write_text("a b\n")
    result = run_allennlp(
        [
            "elmo-embed",
            str(tmp_path / "model"),
            str(tmp_path / "input.txt"),
            str(tmp_path / "out.hdf5"),
        ],
        check=False,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "nor an ELMoForManyLangs model folder" in result.stderr


def test_continued_pretraining_with_learning_rate_0_keeps_the_release_embeddings(
    tmp_path, tiny_corpus, plugin_cwd
):
    """allennlp train elmo_manylangs_continue.jsonnet (lr 0, tiny sizes) -> an archive whose
    embeddings, through elmo-embed, the elmo_embeddings predictor and elmo_bilm_embedder, are
    the release's."""
    folder = make_manylangs_folder(tmp_path / "manylangs")
    elmo = "model.text_field_embedder.token_embedders.elmo."
    values = {
        "vocabulary.model_folder": str(folder),
        "model.pretrained_file": str(folder),
        "train_data_path": str(tiny_corpus / "train" / "*.txt"),
        "validation_data_path": str(tiny_corpus / "valid.txt"),
        "dataset_reader.token_indexers.elmo.max_characters_per_token": MAX_CHARS,
        elmo + "max_characters_per_token": MAX_CHARS,
        elmo + "char_dim": 5,
        elmo + "filters": [[1, 4], [2, 4], [3, 8]],
        elmo + "projection_dim": 8,
        elmo + "word_dim": 6,
        elmo + "activation": "tanh",
        "model.contextualizer.input_dim": 8,
        "model.contextualizer.cell_size": 16,
        "trainer.num_epochs": 1,
        "trainer.optimizer.lr": 0.0,
    }
    run_allennlp_in_process(
        train_args(CONFIG_DIR / "elmo_manylangs_continue.jsonnet", "out", values), cwd=plugin_cwd
    )
    archive = plugin_cwd / "out" / "model.tar.gz"
    metrics = json.loads((plugin_cwd / "out" / "metrics.json").read_text())
    assert numpy.isfinite(metrics["best_validation_perplexity"])
    sentences = [line.split() for line in LINES]
    expected = reference_layers(folder, sentences)
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"sentence": line}) + "\n" for line in LINES), encoding="utf-8"
    )
    with hidden(folder):  # the archive alone
        ours = embedded(archive, tmp_path)
        predicted = predictions(archive, tmp_path / "in.jsonl")
        vocab = Vocabulary()
        embedder = ElmoBiLmEmbedder(vocab, pretrained_file=str(archive))
        downstream = our_layers(embedder, vocab, sentences)
    assert_same_layers(ours, expected)
    assert_same_layers(downstream, expected)
    assert_same_layers([numpy.array(p["layers"], dtype=numpy.float32) for p in predicted], expected)
