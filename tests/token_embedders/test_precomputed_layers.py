"""elmo_bilm_embedder's `precomputed_layers`: the layers of an `elmo-embed` file give the plain
embedder's output (sentences the file lacks run the biLM); a file of another shape or another
biLM is an error naming it."""

from pathlib import Path

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.elmo import batch_to_ids

from elmo_plugin.archives.bilm_source import load_bilm_encoder
from elmo_plugin.commands.elmo_embed import OutputFormat, embed_file
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.elmo_files.elmo_reference import (
    SENTENCES,
    random_encoder,
    transformer_bilm_folder,
    write_pair,
)

IN_FILE, NOT_IN_FILE = SENTENCES[:5], SENTENCES[5:]
MIX, GAMMA = [0.3, -0.5, 1.0], 1.7


def biLM_folder(kind: str, folder: Path) -> str:
    if kind == "lstm":
        write_pair(random_encoder(1.0), folder)
    else:
        transformer_bilm_folder(folder)
    return str(folder)


def embed(model: str, sentences: list[list[str]], out: Path, **form) -> str:
    """`elmo-embed MODEL` of `sentences` (one per line) into `out` -> its path."""
    text = out.with_suffix(".txt")
    text.write_text("".join(" ".join(sentence) + "\n" for sentence in sentences))
    embed_file(load_bilm_encoder(model), str(text), str(out), output_format=OutputFormat(**form))
    return str(out)


def embedder(model: str, **kwargs) -> ElmoBiLmEmbedder:
    made = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=model, dropout=0.0, **kwargs).eval()
    with torch.no_grad():
        for parameter, value in zip(made.scalar_mix.scalar_parameters, MIX, strict=True):
            parameter.fill_(value)
        made.scalar_mix.gamma.fill_(GAMMA)
    return made


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
def test_precomputed_layers_give_the_plain_embedders_output(kind, tmp_path):
    model = biLM_folder(kind, tmp_path / "bilm")
    cached = embedder(model, precomputed_layers=embed(model, IN_FILE, tmp_path / "layers.hdf5"))
    plain = embedder(model)
    # hits and misses in one batch, padding, a batch of one, a batch of misses only
    for sentences in (SENTENCES, [IN_FILE[1]], NOT_IN_FILE, IN_FILE[::-1]):
        char_ids = batch_to_ids(sentences)
        with torch.no_grad():
            expected, actual = plain(char_ids), cached(char_ids)
        assert actual.shape == expected.shape
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)
    assert len(cached._precomputed or []) == len(IN_FILE)
    # checked once: sentences the file holds no longer run the biLM
    calls = []
    cached.bilm.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        cached(batch_to_ids(IN_FILE))
        assert calls == []
        cached(batch_to_ids(NOT_IN_FILE[:1] + IN_FILE))
    assert calls == [1]


def test_gradients_reach_the_mix_through_precomputed_layers(tmp_path):
    model = biLM_folder("lstm", tmp_path / "bilm")
    cached = embedder(model, precomputed_layers=embed(model, IN_FILE, tmp_path / "layers.hdf5"))
    plain = embedder(model)
    char_ids = batch_to_ids(SENTENCES)
    for made in (plain, cached):
        made(char_ids).pow(2).sum().backward()
    for ours, reference in zip(
        cached.scalar_mix.parameters(), plain.scalar_mix.parameters(), strict=True
    ):
        torch.testing.assert_close(ours.grad, reference.grad, rtol=1e-5, atol=1e-5)
    assert all(parameter.grad is None for parameter in cached.bilm.parameters())


def test_a_file_of_another_biLM_is_an_error_at_the_first_batch(tmp_path):
    model = biLM_folder("lstm", tmp_path / "bilm")
    write_pair(random_encoder(1.0, seed=1), tmp_path / "other")
    layers = embed(str(tmp_path / "other"), IN_FILE, tmp_path / "other.hdf5")
    cached = embedder(model, precomputed_layers=layers)
    with pytest.raises(ConfigurationError, match=f"{layers} was not made by this biLM"):
        cached(batch_to_ids(IN_FILE))


def test_pooled_or_float16_files_and_fine_tuning_are_errors_naming_the_file(tmp_path):
    model = biLM_folder("lstm", tmp_path / "bilm")
    pooled = embed(model, IN_FILE, tmp_path / "pooled.hdf5", pool="mean")
    with pytest.raises(ConfigurationError, match=f"{pooled}: dataset '0' has shape"):
        embedder(model, precomputed_layers=pooled)
    half = embed(model, IN_FILE, tmp_path / "half.hdf5", dtype="float16")
    with pytest.raises(ConfigurationError, match=f"{half}: dataset '0' is float16"):
        embedder(model, precomputed_layers=half)
    with pytest.raises(ConfigurationError, match="needs requires_grad false"):
        embedder(model, precomputed_layers=half, requires_grad=True)
    with pytest.raises(ConfigurationError, match="not an elmo-embed output file"):
        embedder(model, precomputed_layers=str(tmp_path / "missing.hdf5"))
