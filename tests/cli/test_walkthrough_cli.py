"""The AllenNLP ELMo walkthrough's path, both ways, through the `allennlp` CLI (in this process):
allennlp-models' bidirectional `language_model` archives (plain and `sharded` reader) in our
tools, and our biLM archive in allennlp-models' `bidirectional_lm_token_embedder`."""

import json
import math
import shutil
from pathlib import Path

import h5py
import numpy
import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch, Instance, Token, Vocabulary
from allennlp.data.fields import TextField
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer, SingleIdTokenIndexer
from allennlp.models.archival import load_archive
from allennlp_models.lm.modules.token_embedders.bidirectional_lm import (
    BidirectionalLanguageModelTokenEmbedder,
)

from elmo_plugin.archives.bilm_source import load_bilm_encoder
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.helpers import (
    CONFIG_DIR,
    TINY_TAGGER_OVERRIDES,
    evaluation,
    predictions,
    run_allennlp_in_process,
    train_args,
)

TOLERANCE = 1e-5
SENTENCES = ["the cat sat on the mat .", "", "a b", "unseenword and the rest of it"]


def walkthrough_config(
    tiny_corpus: Path, vocabulary: Path, sharded: bool, bidirectional: bool = True
) -> dict:
    """allennlp-models' walkthrough (`training_config/lm/bidirectional_language_model.jsonnet`)
    by its registered names, at a tiny size."""
    reader = {
        "type": "simple_language_modeling",
        "tokenizer": {"type": "just_spaces"},
        "token_indexers": {
            "tokens": {"type": "single_id"},
            "token_characters": {"type": "elmo_characters"},
        },
        "max_sequence_length": 400,
        "start_tokens": ["<S>"],
        "end_tokens": ["</S>"],
    }
    contextualizer = {
        "type": "bidirectional_language_model_transformer",
        "input_dim": 16,
        "hidden_dim": 32,
        "num_layers": 2,
        "dropout": 0.1,
        "input_dropout": 0.1,
    }
    if not bidirectional:
        contextualizer = {"type": "lstm", "input_size": 16, "hidden_size": 16}
    return {
        # `sharded` reads a glob (a single existing file is refused), its base reader each shard.
        "dataset_reader": {"type": "sharded", "base_reader": reader} if sharded else reader,
        "train_data_path": str(tiny_corpus / "train" / "*.txt")
        if sharded
        else str(tiny_corpus / "train" / "shard_0.txt"),
        "validation_data_path": str(tiny_corpus / "valid*.txt")
        if sharded
        else str(tiny_corpus / "valid.txt"),
        "vocabulary": {"type": "from_files", "directory": str(vocabulary)},
        "model": {
            "type": "language_model",
            "bidirectional": bidirectional,
            "dropout": 0.1,
            "text_field_embedder": {
                "token_embedders": {
                    "tokens": {"type": "empty"},
                    "token_characters": {
                        "type": "character_encoding",
                        "embedding": {"num_embeddings": 262, "embedding_dim": 4},
                        "encoder": {
                            "type": "cnn-highway",
                            "activation": "relu",
                            "embedding_dim": 4,
                            "filters": [[1, 8], [2, 8], [3, 16]],
                            "num_highway": 1,
                            "projection_dim": 16,
                            "projection_location": "after_highway",
                            "do_layer_norm": True,
                        },
                    },
                }
            },
            "contextualizer": contextualizer,
        },
        "data_loader": {"batch_size": 16},
        "trainer": {"num_epochs": 1, "optimizer": {"type": "adam", "lr": 0.003}},
    }


@pytest.fixture(scope="module")
def walkthrough_vocabulary(tiny_corpus, tmp_path_factory) -> Path:
    """The walkthrough's vocabulary folder: tokens.txt (`elmo-vocab` writes <S>, </S>,
    @@UNKNOWN@@ first) and non_padded_namespaces.txt."""
    folder = tmp_path_factory.mktemp("walkthrough_vocabulary")
    run_allennlp_in_process(
        ["elmo-vocab", str(tiny_corpus / "train" / "*.txt"), str(folder / "tokens.txt")]
    )
    (folder / "non_padded_namespaces.txt").write_text("*labels\n*tags\n")
    return folder


def train_walkthrough(tiny_corpus, vocabulary, folder: Path, **kwargs) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.json"
    config.write_text(json.dumps(walkthrough_config(tiny_corpus, vocabulary, **kwargs)))
    run_allennlp_in_process(["train", str(config), "-s", str(folder / "model")])
    return folder / "model" / "model.tar.gz"


@pytest.fixture(scope="module", params=["plain", "sharded"])
def their_archive(request, tiny_corpus, walkthrough_vocabulary, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp(f"walkthrough_{request.param}")
    return train_walkthrough(
        tiny_corpus, walkthrough_vocabulary, folder, sharded=request.param == "sharded"
    )


def their_layers(archive: Path, sentences: list[list[str]]) -> list[numpy.ndarray]:
    """Per sentence, the layers allennlp-models' `bidirectional_lm_token_embedder` hands its
    ScalarMix, `<S>`/`</S>` removed: (layers, tokens, dim). On a `sharded` archive its own
    `<S>`/`</S>` lookup crashes (no `dataset_reader.token_indexers`), so there the boundaries
    are indexed here, by allennlp's `elmo_characters` indexer, as it would index them."""
    sharded = "base_reader" in load_archive(str(archive)).config.as_dict()["dataset_reader"]
    kwargs = {"bos_eos_tokens": None} if sharded else {}
    embedder = BidirectionalLanguageModelTokenEmbedder(archive_file=str(archive), **kwargs).eval()
    wrapped = [["<S>", *tokens, "</S>"] if sharded else tokens for tokens in sentences]
    indexer = ELMoTokenCharactersIndexer()
    ids = torch.zeros(len(wrapped), max(map(len, wrapped)), 50, dtype=torch.long)
    for row, tokens in enumerate(wrapped):
        indexed = indexer.tokens_to_indices([Token(t) for t in tokens], Vocabulary())["elmo_tokens"]
        ids[row, : len(tokens)] = torch.tensor(indexed)
    captured = []
    embedder._scalar_mix.register_forward_hook(
        lambda module, inputs, output: captured.append(inputs[0])
    )
    with torch.no_grad():
        embedder(ids)
    return [
        numpy.stack([layer[row, 1 : len(tokens) + 1].numpy() for layer in captured[0]])
        for row, tokens in enumerate(sentences)
    ]


def test_elmo_embed_gives_the_layers_allennlp_models_embedder_mixes(
    their_archive, tmp_path, plugin_cwd
):
    (tmp_path / "input.txt").write_text("\n".join(SENTENCES) + "\n")
    for layers in ("all", "average", "top"):
        embed = ["elmo-embed", str(their_archive), str(tmp_path / "input.txt")]
        embed += [str(tmp_path / f"{layers}.hdf5"), "--layers", layers, "--batch-size", "2"]
        run_allennlp_in_process(embed, cwd=plugin_cwd)
    sentences = [line.split() for line in SENTENCES if line]
    expected = dict(zip(["0", "2", "3"], their_layers(their_archive, sentences), strict=True))
    with (
        h5py.File(tmp_path / "all.hdf5") as every,
        h5py.File(tmp_path / "average.hdf5") as average,
        h5py.File(tmp_path / "top.hdf5") as top,
    ):
        assert every["1"].shape == (3, 0, 32)  # the blank line
        for line, layers in expected.items():
            assert every[line].shape == layers.shape == (3, len(SENTENCES[int(line)].split()), 32)
            assert numpy.abs(every[line][()] - layers).max() <= TOLERANCE
            assert numpy.abs(average[line][()] - layers.mean(axis=0)).max() <= TOLERANCE
            assert numpy.abs(top[line][()] - layers[-1]).max() <= TOLERANCE


def source_tensors(archive, tokens: list[str]):
    """`<S> tokens </S>` indexed by the walkthrough's indexers, as one batch."""
    model = load_archive(str(archive)).model.eval()
    indexers = {"tokens": SingleIdTokenIndexer(), "token_characters": ELMoTokenCharactersIndexer()}
    batch = Batch(
        [Instance({"source": TextField([Token(t) for t in ["<S>", *tokens, "</S>"]], indexers)})]
    )
    batch.index_instances(model.vocab)
    return model, batch.as_tensor_dict()["source"]


def test_predictors_read_their_archive(their_archive, tmp_path, plugin_cwd):
    inputs = tmp_path / "input.jsonl"
    inputs.write_text(
        json.dumps({"sentence": SENTENCES[0]})
        + "\n"
        + json.dumps({"tokens": SENTENCES[2].split()})
        + "\n"
    )
    outputs = {
        predictor: predictions(their_archive, inputs, "--predictor", predictor, cwd=plugin_cwd)
        for predictor in ("elmo_embeddings", "elmo_lm_scorer")
    }
    expected = their_layers(their_archive, [SENTENCES[0].split(), SENTENCES[2].split()])
    for output, layers in zip(outputs["elmo_embeddings"], expected, strict=True):
        assert numpy.abs(numpy.array(output["layers"]) - layers).max() <= TOLERANCE
    # The scorer's sentence perplexity is exp of allennlp-models' own loss on the sentence.
    for output, text in zip(outputs["elmo_lm_scorer"], [SENTENCES[0], SENTENCES[2]], strict=True):
        model, source = source_tensors(their_archive, text.split())
        with torch.no_grad():
            loss = model(source)["loss"].item()
        assert output["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)
        assert len(output["forward_log_probs"]) == len(text.split()) + 1


def test_elmo_bilm_embedder_over_their_archive_makes_a_tagger_archive_that_stands_alone(
    their_archive, tiny_tagged_data, tmp_path, plugin_cwd
):
    copy = tmp_path / "their_lm.tar.gz"
    shutil.copy(their_archive, copy)
    values = dict(
        TINY_TAGGER_OVERRIDES,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
        **{
            "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(copy),
            "trainer.num_epochs": 2,
            "data_loader.batch_sampler.batch_size": 8,
        },
    )
    run_allennlp_in_process(
        train_args(CONFIG_DIR / "pos_tagger_elmo.jsonnet", "tagger", values), cwd=plugin_cwd
    )
    archive = plugin_cwd / "tagger" / "model.tar.gz"
    tagger = load_archive(str(archive)).model
    copy.unlink()  # the tagger archive rebuilds the biLM from its recorded architecture
    valid = tiny_tagged_data / "valid.conllu"
    evaluated = evaluation(archive, valid, plugin_cwd / "metrics.json", cwd=plugin_cwd)
    metrics = json.loads((plugin_cwd / "tagger" / "metrics.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(metrics["best_validation_accuracy"], abs=1e-6)
    # Its biLM equals the one elmo-embed loads from their archive.
    bilm = tagger.text_field_embedder._token_embedders["elmo"].bilm
    reference = load_bilm_encoder(str(their_archive)).state_dict()
    assert all(torch.equal(value, reference[name]) for name, value in bilm.state_dict().items())


def test_a_unidirectional_language_model_is_a_clear_error(
    tiny_corpus, walkthrough_vocabulary, tmp_path
):
    archive = train_walkthrough(
        tiny_corpus, walkthrough_vocabulary, tmp_path, sharded=False, bidirectional=False
    )
    with pytest.raises(
        ConfigurationError, match=r"unidirectional language_model .*\(bidirectional: true\)"
    ):
        load_bilm_encoder(str(archive))
    with pytest.raises(
        ConfigurationError, match=r"unidirectional language_model .*\(bidirectional: true\)"
    ):
        ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(archive))


def test_tagger_trains_with_allennlp_models_embedder_over_our_archive(
    tiny_bilm_archive, tiny_tagged_data, tmp_path, plugin_cwd
):
    config = Params.from_file(str(CONFIG_DIR / "pos_tagger_elmo.jsonnet")).as_dict()
    config["model"]["text_field_embedder"]["token_embedders"]["elmo"] = {
        "type": "bidirectional_lm_token_embedder",
        "archive_file": str(tiny_bilm_archive),
        "dropout": 0.2,
    }
    # elmo_process_settings and tensorboard: no elmo_bilm_embedder to watch
    config["trainer"]["callbacks"] = config["trainer"]["callbacks"][:2]
    (tmp_path / "tagger.json").write_text(json.dumps(config))
    values = dict(
        TINY_TAGGER_OVERRIDES,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
        **{
            "trainer.num_epochs": 6,
            "data_loader.batch_sampler.batch_size": 8,
            "trainer.optimizer.lr": 0.01,
        },
    )
    run_allennlp_in_process(train_args(tmp_path / "tagger.json", "tagger", values), cwd=plugin_cwd)
    metrics = json.loads((plugin_cwd / "tagger" / "metrics.json").read_text())
    assert metrics["best_validation_accuracy"] > 0.9
