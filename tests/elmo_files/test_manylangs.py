"""ELMoForManyLangs model folders: our embedder equals its own `Embedder` (every layer)."""

import json
from typing import cast

import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Batch, Instance, TextFieldTensors, Vocabulary
from allennlp.data.fields import TextField
from allennlp.data.tokenizers import Token

from elmo_plugin.data.elmo_manylangs_files import read_dictionary
from elmo_plugin.data.elmo_manylangs_indexer import ElmoManyLangsIndexer
from elmo_plugin.elmo_files.manylangs import read_manylangs_folder
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.elmo_files.manylangs_reference import (
    MAX_CHARS,
    SENTENCES,
    make_manylangs_folder,
    reference_layers,
)


def our_layers(
    embedder: ElmoBiLmEmbedder, vocab: Vocabulary, sentences, max_chars: int = MAX_CHARS
):
    """Every layer per sentence (layers, tokens, dim), `<bos>`/`<eos>` removed."""
    indexer = ElmoManyLangsIndexer(max_characters_per_token=max_chars)
    instances = [
        Instance({"text": TextField([Token(t) for t in s], {"elmo": indexer})}) for s in sentences
    ]
    batch = Batch(instances)
    batch.index_instances(vocab)
    ids = cast(TextFieldTensors, batch.as_tensor_dict()["text"])["elmo"]["elmo_tokens"]
    with torch.no_grad():
        layers, _ = embedder.layers(ids)
    return [
        torch.stack([layer[i, 1 : len(s) + 1] for layer in layers]).numpy()
        for i, s in enumerate(sentences)
    ]


def assert_same_layers(ours, theirs):
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape
        numpy.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("word_dim", [6, 0], ids=["with_word_embedding", "characters_only"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_every_layer_equals_elmoformanylangs_embedder(tmp_path, word_dim, activation):
    folder = make_manylangs_folder(tmp_path / "model", word_dim=word_dim, activation=activation)
    vocab = Vocabulary()
    embedder = ElmoBiLmEmbedder(vocab, pretrained_file=str(folder))
    assert embedder.bilm.num_layers == 3
    assert_same_layers(our_layers(embedder, vocab, SENTENCES), reference_layers(folder, SENTENCES))


def test_no_cell_clip_and_a_config_path_found_by_file_name(tmp_path):
    """cell_clip 0 means no clipping (its `if clip:`); an absolute config_path that does not exist
    is looked up by file name in the folder."""
    folder = make_manylangs_folder(
        tmp_path / "model", config_path="/elsewhere/tiny.json", cell_clip=0
    )
    vocab = Vocabulary()
    embedder = ElmoBiLmEmbedder(vocab, pretrained_file=str(folder))
    assert embedder.bilm.contextualizer.cell_clip is None
    assert_same_layers(our_layers(embedder, vocab, SENTENCES), reference_layers(folder, SENTENCES))


def test_dictionary_line_with_one_field_names_ideographic_space(tmp_path):
    """Lines are stripped, then split at the tab: U+3000's own line loses its token; inner
    spaces stay."""
    path = tmp_path / "char.dic"
    path.write_text("<oov>\t0\n\u3000\t1\n  x \t2\n", encoding="utf-8")
    assert read_dictionary(str(path), ("<oov>",)) == {"<oov>": 0, "\u3000": 1, "x ": 2}


def test_bad_dictionary_line_is_named(tmp_path):
    path = tmp_path / "char.dic"
    path.write_text("<oov>\t0\nab\tcd\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"char.dic, line 2: expected 'token<TAB>id'"):
        read_dictionary(str(path), ("<oov>",))


@pytest.mark.parametrize(
    "lines", ["<oov>\t0\na\t2\n", "<oov>\t0\na\t0\n"], ids=["gap", "shared_id"]
)
def test_dictionary_ids_must_be_its_embedding_rows(tmp_path, lines):
    path = tmp_path / "char.dic"
    path.write_text(lines, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"char.dic: its ids are not 0..1, each used once"):
        read_dictionary(str(path), ("<oov>",))


def test_downstream_archive_rebuilds_the_same_embedder_from_vocabulary(tmp_path):
    """Without the folder: the architecture and dictionaries come back from the saved vocabulary,
    the weights from the state dict."""
    folder = make_manylangs_folder(tmp_path / "model")
    vocab = Vocabulary()
    embedder = ElmoBiLmEmbedder(vocab, pretrained_file=str(folder))
    vocab.save_to_files(str(tmp_path / "vocabulary"))
    loaded = Vocabulary.from_files(str(tmp_path / "vocabulary"))
    rebuilt = ElmoBiLmEmbedder(loaded)
    rebuilt.load_state_dict(embedder.state_dict())
    assert_same_layers(
        our_layers(rebuilt, loaded, SENTENCES), our_layers(embedder, vocab, SENTENCES)
    )


def test_indexer_with_another_character_limit_is_refused(tmp_path):
    folder = make_manylangs_folder(tmp_path / "model")
    vocab = Vocabulary()
    embedder = ElmoBiLmEmbedder(vocab, pretrained_file=str(folder))
    with pytest.raises(
        ConfigurationError, match="its indexer gives 51 ids per token, the biLM reads 13"
    ):
        our_layers(embedder, vocab, SENTENCES, max_chars=50)
    with pytest.raises(
        ConfigurationError,
        match="got 50 characters per token, the model has max_characters_per_token 12",
    ):
        embedder.bilm.char_cnn(torch.ones(1, 2, 51, dtype=torch.long))


def test_unsupported_lstm_variants_are_refused(tmp_path):
    folder = make_manylangs_folder(tmp_path / "model")
    config = json.loads((folder / "tiny.json").read_text())
    config["encoder"]["name"] = "lstm"
    (folder / "tiny.json").write_text(json.dumps(config))
    with pytest.raises(
        ConfigurationError, match="only the 'cnn' token embedder with the 'elmo' encoder"
    ):
        ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(folder))


def test_folder_of_no_known_kind_is_refused(tmp_path):
    (tmp_path / "char.dic").write_text("a\t0\n")
    with pytest.raises(ConfigurationError, match="nor an ELMoForManyLangs model folder"):
        ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path))


def test_gradients_equal_elmoformanylangs_model(tmp_path):
    """Continued pretraining starts from the same function: the gradients of every weight, for a
    loss over every layer at every real position (`<bos>`/`<eos>` included), equal those of its
    own `Model` (eval mode, one batch; float64 on both sides, so that summation order does not
    matter)."""
    elmoformanylangs = pytest.importorskip("elmoformanylangs")
    from elmoformanylangs.elmo import read_list
    from elmoformanylangs.frontend import create_one_batch

    folder = make_manylangs_folder(tmp_path / "model")
    reference = elmoformanylangs.Embedder(str(folder))
    reference.model.double()
    data, _ = read_list(SENTENCES, MAX_CHARS)
    words, chars, lengths, masks = create_one_batch(
        data, reference.word_lexicon, reference.char_lexicon, reference.config, sort=False
    )
    their_layers = reference.model(words, chars, masks)  # (layers, batch, tokens, dim)
    keep = masks[0].bool()
    weights = torch.randn(
        their_layers.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    (their_layers * weights)[:, keep].sum().backward()

    encoder, _ = read_manylangs_folder(str(folder))
    encoder.double()
    characters, (bos, eos) = encoder.characters, encoder.characters.boundary_ids()
    rows = [[bos, *map(characters.token_ids, s), eos] for s in SENTENCES]
    ids = torch.zeros(len(rows), max(lengths), 1 + MAX_CHARS, dtype=torch.long)
    for row, sentence in enumerate(rows):
        ids[row, : len(sentence)] = torch.tensor(sentence)
    our_layers_, mask = encoder(ids)
    assert torch.equal(mask, keep)
    (torch.stack(our_layers_) * weights)[:, keep].sum().backward()

    theirs = dict(reference.model.token_embedder.named_parameters())
    ours = dict(encoder.char_cnn.named_parameters())
    pairs = [
        (ours["char_embedding.weight"], theirs["char_emb_layer.embedding.weight"]),
        (ours["word_embedding.weight"], theirs["word_emb_layer.embedding.weight"]),
    ]
    pairs += [
        (ours[name], theirs[name])
        for name in theirs
        if not name.endswith("emb_layer.embedding.weight")
    ]
    lstm = dict(reference.model.encoder.named_parameters())
    for direction in ("forward", "backward"):
        for layer in range(2):
            cell, torch_lstm = (
                f"{direction}_layer_{layer}.",
                getattr(encoder.contextualizer, f"{direction}_layers")[layer],
            )
            pairs += [
                (torch_lstm.weight_ih_l0, lstm[cell + "input_linearity.weight"]),
                (torch_lstm.weight_hh_l0, lstm[cell + "state_linearity.weight"]),
                (torch_lstm.bias_ih_l0, lstm[cell + "state_linearity.bias"]),
                (torch_lstm.weight_hr_l0, lstm[cell + "state_projection.weight"]),
            ]
    assert (
        len(pairs) == 2 + 3 * 2 + 2 * 2 + 2 + 4 * 4
    )  # embeddings, convs, highways, projection, LSTMs
    for mine, reference_parameter in pairs:
        torch.testing.assert_close(mine.grad, reference_parameter.grad, rtol=1e-7, atol=1e-9)
