"""Tiny random ELMoForManyLangs models, built with the `elmoformanylangs` package's own classes
and saved in its folder layout, and its own `Embedder`'s outputs for comparison."""

import json
import logging
import sys
import types
from pathlib import Path
from typing import Optional

import numpy
import pytest
import torch


def _import_elmoformanylangs():
    """Imports the reference package with `overrides.overrides` as the identity.

    Its one `@overrides` (on `Highway.forward`) is a lint check with no effect at run time, and no
    release of `overrides` can both parse Python 3.12+ class bodies (3.x-4.x raise IndexError) and
    accept that method's return type (5.x+ raise TypeError). The stand-in lives in `sys.modules`
    only during the import."""
    stand_in = types.ModuleType("overrides")
    stand_in.overrides = lambda method: method
    real = sys.modules.get("overrides")
    sys.modules["overrides"] = stand_in
    try:
        return pytest.importorskip("elmoformanylangs")  # pinned in constraints.txt
    finally:
        if real is None:
            del sys.modules["overrides"]
        else:
            sys.modules["overrides"] = real


elmoformanylangs = _import_elmoformanylangs()
# E402: these imports need elmoformanylangs imported with the stand-in above first
from elmoformanylangs.frontend import Model  # noqa: E402
from elmoformanylangs.modules.embedding_layer import EmbeddingLayer  # noqa: E402

logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)

CHAR_SPECIALS = ["<oov>", "<pad>", "<bow>", "<eow>", "<bos>", "<eos>"]
WORD_SPECIALS = ["<oov>", "<bos>", "<eos>", "<pad>"]
# Characters in char.dic: some non-ASCII ones, and U+3000 (written as its line "\u3000\tid",
# which the reader strips to one field). Other characters of the text are missing.
CHARACTERS = list("abcdefghilmnorstuéü中文日本") + ["\u3000"]
WORDS = ["the", "cat", "über", "中文", "sat", "on", "mat"]
# Non-ASCII text, characters and words missing from the dictionaries ("z", "ß", "xyz"), a
# token longer than the character limit, a U+3000 inside a token, sentences of different lengths.
SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["über", "中文", "日本語", "ßz", "xyz"],
    ["a" * 30, "the", "cat" + "b" * 20],
    ["中\u3000文", "é"],
    ["mat"],
]
MAX_CHARS = 12


def architecture(
    word_dim: int,
    activation: str = "tanh",
    cell_clip: float = 3.0,
    projection_dim: int = 8,
    max_characters: int = MAX_CHARS,
    dim: int = 16,
) -> dict:
    return {
        "encoder": {
            "name": "elmo",
            "projection_dim": projection_dim,
            "cell_clip": cell_clip,
            "proj_clip": 3,
            "dim": dim,
            "n_layers": 2,
        },
        "token_embedder": {
            "name": "cnn",
            "activation": activation,
            "filters": [[1, 4], [2, 4], [3, 8]],
            "n_highway": 2,
            "word_dim": word_dim,
            "char_dim": 5,
            "max_characters_per_token": max_characters,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 8},
        "dropout": 0.1,
    }


def write_dictionary(path: Path, tokens: list[str]) -> dict:
    path.write_text(
        "".join(f"{token}\t{index}\n" for index, token in enumerate(tokens)), encoding="utf-8"
    )
    return {token: index for index, token in enumerate(tokens)}


def make_manylangs_folder(
    folder: Path,
    word_dim: int = 6,
    activation: str = "tanh",
    config_path: Optional[str] = None,
    seed: int = 0,
    **kwargs,
) -> Path:
    """A random model of `architecture(word_dim, activation)` in ELMoForManyLangs' layout; its
    config.json names the architecture file `config_path` (default: a relative name)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = architecture(word_dim, activation, **kwargs)
    (folder / "tiny.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "config.json").write_text(
        json.dumps({"config_path": config_path or "tiny.json"}), encoding="utf-8"
    )
    torch.manual_seed(seed)
    chars = write_dictionary(folder / "char.dic", CHAR_SPECIALS + CHARACTERS)
    char_layer = EmbeddingLayer(config["token_embedder"]["char_dim"], chars, fix_emb=False)
    word_layer = None
    if word_dim > 0:
        words = write_dictionary(folder / "word.dic", WORD_SPECIALS + WORDS)
        word_layer = EmbeddingLayer(word_dim, words, fix_emb=False)
    model = Model(config, word_layer, char_layer)
    with torch.no_grad():  # every weight random, biases too (the package leaves some at 0 / 1)
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    torch.save(model.token_embedder.state_dict(), folder / "token_embedder.pkl")
    torch.save(model.encoder.state_dict(), folder / "encoder.pkl")
    return folder


def reference_layers(folder: Path, sentences: list[list[str]]) -> list[numpy.ndarray]:
    """Its own `Embedder` on one batch (its LSTM carries state across batches): per sentence
    (layers, tokens, dim), every layer (`output_layer=-2`)."""
    embedder = elmoformanylangs.Embedder(str(folder), batch_size=len(sentences))
    return embedder.sents2elmo(sentences, output_layer=-2)
