"""What the README and docs/ promise of the CLI, each checked against an independent
reference: `elmo-embed` against allennlp's own ELMo reader (LSTM) and against the archived
model (transformer); `elmo_embeddings` as the biLM's default predictor; `whitespace_tagger`'s
logits and mask (these through the CLI in this process); the subcommands found through
allennlp's global plugins file alone (in a process of its own)."""

import json
import os
import subprocess
import sys

import h5py
import pytest
import torch
from allennlp.data import Token
from allennlp.models.archival import load_archive
from allennlp.modules.elmo import batch_to_ids

from benchmarks.support.common import ALLENNLP
from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from tests.elmo_files.elmo_reference import allennlp_elmo, allennlp_layers
from tests.helpers import REPO_ROOT, predictions, run_allennlp_in_process

SENTENCES = ["The file is open .", "Return the value of the key in the table", "a"]


def embed_all_layers(model_path, tmp_path, cwd):
    """`allennlp elmo-embed MODEL` of SENTENCES, every layer -> {line: (layers, tokens, dim)}."""
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    run_allennlp_in_process(
        ["elmo-embed", str(model_path), str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5")],
        cwd=cwd,
    )
    with h5py.File(tmp_path / "out.hdf5", "r") as vectors:
        return {
            int(name): torch.from_numpy(vectors[name][()])
            for name in vectors
            if name != "sentence_to_index"
        }


def test_elmo_embed_of_exported_files_equals_allennlps_elmo(
    tiny_bilm_archive, tmp_path, plugin_cwd
):
    """elmo-embed on the folder `elmo-export` wrote: every layer equals what allennlp's own
    `Elmo` reader computes from the same options.json + weights.hdf5 (boundaries removed)."""
    run_allennlp_in_process(
        ["elmo-export", str(tiny_bilm_archive), str(tmp_path / "files")], cwd=plugin_cwd
    )
    ours = embed_all_layers(tmp_path / "files", tmp_path, plugin_cwd)
    elmo = allennlp_elmo(
        str(tmp_path / "files" / "options.json"), str(tmp_path / "files" / "weights.hdf5")
    )
    for line, sentence in enumerate(SENTENCES):
        layers, _ = allennlp_layers(elmo, batch_to_ids([sentence.split()]))
        expected = torch.stack([layer[0, 1:-1] for layer in layers])  # <S> and </S> removed
        torch.testing.assert_close(ours[line], expected, rtol=0, atol=1e-5)


def test_elmo_embed_of_a_transformer_archive_equals_the_archived_model(
    tiny_transformer_archive, tmp_path, plugin_cwd
):
    ours = embed_all_layers(tiny_transformer_archive, tmp_path, plugin_cwd)
    encoder = load_archive(str(tiny_transformer_archive)).model.eval().bilm_encoder()
    indexer = ElmoCharIdsIndexer()
    for line, sentence in enumerate(SENTENCES):
        char_ids = torch.tensor(
            [[indexer.char_ids(token) for token in ["<S>", *sentence.split(), "</S>"]]]
        )
        with torch.no_grad():
            layers, _ = encoder(char_ids)
        torch.testing.assert_close(
            ours[line], torch.stack([layer[0, 1:-1] for layer in layers]), rtol=0, atol=1e-5
        )


def test_elmo_embeddings_is_the_bilms_default_predictor(tiny_bilm_archive, tmp_path, plugin_cwd):
    """`allennlp predict` without --predictor on a biLM archive gives elmo_embeddings' output,
    equal to elmo-embed's vectors."""
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"sentence": s}) + "\n" for s in SENTENCES)
    )
    outputs = predictions(tiny_bilm_archive, tmp_path / "in.jsonl", cwd=plugin_cwd)
    embedded = embed_all_layers(tiny_bilm_archive, tmp_path, plugin_cwd)
    for line, (sentence, output) in enumerate(zip(SENTENCES, outputs, strict=True)):
        assert output["tokens"] == sentence.split()
        torch.testing.assert_close(
            torch.tensor(output["layers"]), embedded[line], rtol=0, atol=1e-6
        )


def test_whitespace_tagger_returns_the_models_logits_and_mask(
    tiny_elmo_tagger_archive, tmp_path, plugin_cwd
):
    (tmp_path / "in.jsonl").write_text(json.dumps({"sentence": SENTENCES[1]}) + "\n")
    tagger = ("--predictor", "whitespace_tagger")
    [output] = predictions(tiny_elmo_tagger_archive, tmp_path / "in.jsonl", *tagger, cwd=plugin_cwd)
    words = SENTENCES[1].split()
    archive = load_archive(str(tiny_elmo_tagger_archive))
    model, reader = archive.model.eval(), archive.dataset_reader
    instance = reader.text_to_instance([Token(w) for w in words])
    reader.apply_token_indexers(instance)
    expected = model.forward_on_instance(instance)
    assert output["mask"] == [True] * len(words) and output["words"] == words
    torch.testing.assert_close(
        torch.tensor(output["logits"]), torch.from_numpy(expected["logits"]), rtol=0, atol=1e-5
    )
    num_tags = model.vocab.get_vocab_size("labels")
    assert torch.tensor(output["logits"]).shape == (len(words), num_tags)


@pytest.mark.slow
def test_make_install_is_idempotent_and_subcommands_come_from_the_global_plugins_file(tmp_path):
    """A second `make install` changes nothing and lists elmo_plugin once in ~/.allennlp/plugins;
    from a folder with no .allennlp_plugins and no --include-package, `allennlp` finds our
    subcommands through that file alone."""
    plugins_file = os.path.expanduser("~/.allennlp/plugins")
    make = subprocess.run(
        ["make", "install", f"PYTHON={sys.executable}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert make.returncode == 0, make.stderr[-2000:]
    with open(plugins_file) as plugins:
        assert [line.strip() for line in plugins].count("elmo_plugin") == 1
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    help_text = subprocess.run(
        [ALLENNLP, "--help"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300
    )
    assert not (tmp_path / ".allennlp_plugins").exists()
    for command in ("elmo-embed", "elmo-export", "elmo-vocab"):
        assert command in help_text.stdout, help_text.stderr[-2000:]
