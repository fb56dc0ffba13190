"""elmo_bilm_embedder: allennlp Elmo's numbers from the same files, archives that rebuild
without pretrained_file, frozen / fine-tuned biLM."""

import json
import shutil

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer
from allennlp.modules.elmo import batch_to_ids

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.token_embedders.elmo_bilm_embedder import ARCHITECTURE_NAMESPACE, ElmoBiLmEmbedder
from tests.elmo_files.elmo_reference import (
    SENTENCES,
    TOLERANCE,
    allennlp_elmo,
    batches,
    max_diff,
    random_encoder,
    transformer_bilm_folder,
    with_boundaries,
    write_pair,
)

MIX, GAMMA = [0.3, -0.5, 1.0], 1.7


def set_mix(scalar_mix) -> None:
    with torch.no_grad():
        for parameter, value in zip(scalar_mix.scalar_parameters, MIX, strict=True):
            parameter.fill_(value)
        scalar_mix.gamma.fill_(GAMMA)


@pytest.mark.parametrize("clip", [1.0, None])
@pytest.mark.parametrize("do_layer_norm", [False, True])
def test_embedder_matches_allennlp_elmo_on_the_same_files(tmp_path, clip, do_layer_norm):
    options_file, weights_file = write_pair(random_encoder(clip), tmp_path)
    ours = ElmoBiLmEmbedder(
        Vocabulary(), pretrained_file=str(tmp_path), dropout=0.0, do_layer_norm=do_layer_norm
    ).eval()
    theirs = allennlp_elmo(options_file, weights_file, do_layer_norm=do_layer_norm)
    set_mix(ours.scalar_mix)
    set_mix(theirs.scalar_mix_0)
    assert ours.get_output_dim() == theirs.get_output_dim() == 32
    for char_ids in batches((1, 3, 7)):
        # allennlp's Elmo carries LSTM state across batches
        theirs._elmo_lstm._elmo_lstm.reset_states()
        with torch.no_grad():
            expected = theirs(char_ids)["elmo_representations"][0]
            actual = ours(char_ids)
        assert actual.shape == expected.shape == (*char_ids.shape[:2], 32)
        assert max_diff([actual], [expected]) <= TOLERANCE
        padding = ~(char_ids > 0).any(-1)
        if padding.any():
            assert float(actual[padding].abs().max()) == 0.0


def test_architecture_is_recorded_and_rebuilds_without_pretrained_file(tmp_path):
    write_pair(random_encoder(1.0), tmp_path / "elmo")
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace(["word"], "tokens")
    original = ElmoBiLmEmbedder(vocab, pretrained_file=str(tmp_path / "elmo"), dropout=0.0).eval()
    set_mix(original.scalar_mix)
    recorded = [
        t for t in vocab.get_token_to_index_vocabulary(ARCHITECTURE_NAMESPACE) if t.startswith("{")
    ]
    architecture = json.loads(recorded[0])
    assert architecture["contextualizer"] == {
        "type": "elmo_lstm",
        "input_dim": 16,
        "cell_size": 24,
        "num_layers": 2,
        "cell_clip": 1.0,
        "proj_clip": 1.0,
    }
    assert architecture["token_embedder"]["type"] == "elmo_char_cnn"
    assert architecture["token_embedder"]["filters"] == [[1, 4], [2, 8], [3, 8], [5, 16]]
    # what an archive holds: the saved vocabulary and the state dict, but no pretrained_file
    vocab.save_to_files(str(tmp_path / "vocabulary"))
    (tmp_path / "elmo" / "weights.hdf5").unlink()
    rebuilt = ElmoBiLmEmbedder(
        Vocabulary.from_files(str(tmp_path / "vocabulary")), dropout=0.0
    ).eval()
    rebuilt.load_state_dict(original.state_dict())
    char_ids = batches((7,))[0]
    with torch.no_grad():
        assert torch.equal(rebuilt(char_ids), original(char_ids))
    with pytest.raises(ConfigurationError, match="give pretrained_file"):
        ElmoBiLmEmbedder(Vocabulary())


def test_a_different_recorded_architecture_is_an_error(tmp_path):
    write_pair(random_encoder(1.0), tmp_path / "a")
    write_pair(random_encoder(None), tmp_path / "b")
    vocab = Vocabulary()
    ElmoBiLmEmbedder(vocab, pretrained_file=str(tmp_path / "a"))
    with pytest.raises(ConfigurationError, match="records"):
        ElmoBiLmEmbedder(vocab, pretrained_file=str(tmp_path / "b"))
    with pytest.raises(ConfigurationError, match="not found"):
        ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path / "missing.tar.gz"))


def test_a_folder_named_as_the_published_files_gives_the_same_embeddings(tmp_path):
    options, weights = write_pair(random_encoder(1.0), tmp_path / "standard")
    (tmp_path / "published").mkdir()
    shutil.copy(options, tmp_path / "published" / "elmo_2x16_24_cnn_1xhighway_options.json")
    shutil.copy(weights, tmp_path / "published" / "elmo_2x16_24_cnn_1xhighway_weights.hdf5")
    embedders = [
        ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path / name), dropout=0.0).eval()
        for name in ("standard", "published")
    ]
    char_ids = batches((3,))[0]
    with torch.no_grad():
        assert torch.equal(embedders[1](char_ids), embedders[0](char_ids))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_frozen_or_fine_tuned_biLM(tmp_path, requires_grad):
    write_pair(random_encoder(1.0), tmp_path)
    embedder = ElmoBiLmEmbedder(
        Vocabulary(), pretrained_file=str(tmp_path), requires_grad=requires_grad, dropout=0.0
    )
    embedder.train()
    embedder(batches((3,))[0]).pow(2).sum().backward()
    assert all(
        p.grad is not None and float(p.grad.abs().sum()) > 0
        for p in embedder.scalar_mix.parameters()
    )
    bilm_grads = [p.grad for p in embedder.bilm.parameters()]
    if requires_grad:
        assert sum(float(g.abs().sum()) for g in bilm_grads if g is not None) > 0
    else:
        assert all(g is None for g in bilm_grads) and not any(
            p.requires_grad for p in embedder.bilm.parameters()
        )


def test_no_state_is_carried_between_batches(tmp_path):
    write_pair(random_encoder(1.0), tmp_path)
    embedder = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path), dropout=0.0).eval()
    alone = batch_to_ids([SENTENCES[0]])
    crowded = batch_to_ids([SENTENCES[2], SENTENCES[0], SENTENCES[3]])
    with torch.no_grad():
        first = embedder(alone)
        embedder(crowded)
        again = embedder(alone)
        in_batch = embedder(crowded)[1, : alone.size(1)]
    assert torch.equal(first, again)
    assert max_diff([in_batch], [first[0]]) <= 1e-6


def test_allennlp_elmo_characters_indexer_gives_the_same_input():
    tokens = [Token(t) for t in SENTENCES[2]]
    vocab = Vocabulary()
    ours = ElmoCharIdsIndexer().tokens_to_indices(tokens, vocab)
    theirs = ELMoTokenCharactersIndexer().tokens_to_indices(tokens, vocab)
    assert ours["elmo_tokens"].tolist() == theirs["elmo_tokens"] and list(ours) == ["elmo_tokens"]


def test_transformer_archive_rebuilds_from_the_recorded_architecture(tmp_path):
    """A transformer biLM (no standard files for it) works from its archive, and the downstream
    archive rebuilds it from the recorded architecture."""
    folder, bilm = transformer_bilm_folder(tmp_path / "bilm")
    vocab = Vocabulary()
    embedder = ElmoBiLmEmbedder(vocab, pretrained_file=str(folder), dropout=0.0).eval()
    char_ids = batches((3,))[0]
    with torch.no_grad():
        expected_layers, _ = bilm.bilm_encoder()(with_boundaries(char_ids))
        actual_layers, _ = embedder.layers(char_ids)
    assert max_diff(actual_layers, expected_layers) <= TOLERANCE
    recorded = json.loads(
        [
            t
            for t in vocab.get_token_to_index_vocabulary(ARCHITECTURE_NAMESPACE)
            if t.startswith("{")
        ][0]
    )
    assert (
        recorded["contextualizer"]["type"] == "elmo_transformer"
        and recorded["contextualizer"]["dropout"] == 0.0
    )
    rebuilt = ElmoBiLmEmbedder(vocab, dropout=0.0).eval()
    rebuilt.load_state_dict(embedder.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(char_ids), embedder(char_ids))


def test_projection_dim_projects_the_mix_linearly(tmp_path):
    write_pair(random_encoder(1.0), tmp_path)
    plain = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path), dropout=0.0).eval()
    projected = ElmoBiLmEmbedder(
        Vocabulary(), pretrained_file=str(tmp_path), dropout=0.0, projection_dim=5
    ).eval()
    projected.scalar_mix.load_state_dict(plain.scalar_mix.state_dict())
    char_ids = batches((3,))[0]
    with torch.no_grad():
        expected = projected._projection(plain(char_ids))
        actual = projected(char_ids)
    assert projected.get_output_dim() == 5 and actual.shape == (*char_ids.shape[:2], 5)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-6)


def test_scalar_mix_parameters_fix_the_mix(tmp_path):
    """Fixed pre-softmax weights: the output is gamma * sum_j softmax(s)_j h_j with those s,
    and they are not trained."""
    write_pair(random_encoder(1.0), tmp_path)
    fixed = [1.0, -2.0, 0.5]
    embedder = ElmoBiLmEmbedder(
        Vocabulary(), pretrained_file=str(tmp_path), dropout=0.0, scalar_mix_parameters=fixed
    )
    embedder.eval()
    char_ids = batches((3,))[0]
    with torch.no_grad():
        layers, mask = embedder.layers(char_ids)
        weights = torch.softmax(torch.tensor(fixed), dim=0)
        mixed = sum(w * layer for w, layer in zip(weights, layers, strict=True))[
            :, 1:-1
        ]  # <S>, </S> removed
        actual = embedder(char_ids)
    real = (char_ids > 0).any(-1).unsqueeze(-1)
    torch.testing.assert_close(actual * real, mixed[:, : actual.size(1)] * real, rtol=0, atol=1e-6)
    assert not any(p.requires_grad for p in embedder.scalar_mix.scalar_parameters)


def test_dropout_applies_in_training_only(tmp_path):
    write_pair(random_encoder(1.0), tmp_path)
    embedder = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path), dropout=0.5)
    char_ids = batches((3,))[0]
    with torch.no_grad():
        clean = embedder.eval()(char_ids)
        torch.manual_seed(0)
        dropped = embedder.train()(char_ids)
    zeroed = (dropped == 0) & (clean != 0)
    assert 0.3 < zeroed.float().sum() / (clean != 0).float().sum() < 0.7
    torch.testing.assert_close(dropped[~zeroed & (clean != 0)], 2 * clean[~zeroed & (clean != 0)])


@pytest.mark.parametrize("shape", [(1, 0), (3, 0), (2, 4, 0)])
def test_sentences_of_no_tokens_embed_to_no_vectors(tmp_path, shape):
    write_pair(random_encoder(1.0), tmp_path)
    embedder = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(tmp_path), dropout=0.0).eval()
    with torch.no_grad():
        output = embedder(torch.zeros(*shape, 50, dtype=torch.long))
    assert output.shape == (*shape, 32)
