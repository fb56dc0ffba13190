"""options.json + weights.hdf5 (+ softmax.hdf5, vocab.txt) <-> our modules, checked numerically
against allennlp's own ELMo reader, and every refusal of ELMo files that docs/security.md lists."""

import json
import shutil
from pathlib import Path
from typing import Optional

import h5py
import numpy
import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models import Model

from elmo_plugin.elmo_files.softmax import NO_TOKEN_BIAS, export_softmax, import_softmax
from elmo_plugin.elmo_files.weights import read_bilm_encoder, weight_arrays
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from tests.elmo_files.elmo_reference import (
    TOLERANCE,
    allennlp_elmo,
    allennlp_layers,
    batches,
    max_diff,
    random_encoder,
    tiny_options,
    with_boundaries,
    write_pair,
    write_random_tf_pair,
)


@pytest.mark.parametrize("clip", [1.0, None])
def test_exported_files_give_allennlp_elmo_our_activations(tmp_path, clip):
    encoder = random_encoder(clip)
    elmo = allennlp_elmo(*write_pair(encoder, tmp_path))
    for char_ids in batches((1, 3, 7)) + batches((2,)):  # several sizes, padded
        theirs, their_mask = allennlp_layers(elmo, char_ids)
        with torch.no_grad():
            ours, our_mask = encoder(with_boundaries(char_ids))
        assert torch.equal(our_mask, their_mask)
        assert max_diff(ours, theirs) <= TOLERANCE
        assert float(theirs[-1].abs().max()) > 0.5  # real activations, not all zeros


def test_clipping_changes_the_activations():
    """So the clipped comparisons are meaningful: with these weights both the cell clip and the
    projection clip change the activations."""
    clipped = random_encoder(1.0)
    without_cell_clip, without_proj_clip = random_encoder(1.0), random_encoder(1.0)
    without_cell_clip.contextualizer.cell_clip = None
    without_proj_clip.contextualizer.proj_clip = None
    char_ids = with_boundaries(batches((7,))[0])
    with torch.no_grad():
        layers = clipped(char_ids)[0][1:]
        assert max_diff(layers, without_cell_clip(char_ids)[0][1:]) > 0.1
        assert max_diff(layers, without_proj_clip(char_ids)[0][1:]) > 0.1


@pytest.mark.parametrize("clip,activation", [(1.0, "relu"), (None, "tanh")])
def test_imported_files_match_allennlp_elmo(tmp_path, clip, activation):
    """A pair written directly with h5py (TensorFlow layout, random values) reads into our
    encoder with the activations allennlp's Elmo computes from it."""
    options_file, weights_file = write_random_tf_pair(
        tmp_path, tiny_options(clip, activation), seed=1
    )
    encoder = read_bilm_encoder(options_file, weights_file)
    elmo = allennlp_elmo(options_file, weights_file)
    for char_ids in batches((1, 4, 7)):
        theirs, _ = allennlp_layers(elmo, char_ids)
        with torch.no_grad():
            ours, _ = encoder(with_boundaries(char_ids))
        assert max_diff(ours, theirs) <= TOLERANCE


def test_round_trip_is_exact(tmp_path):
    options_file, weights_file = write_random_tf_pair(tmp_path / "a", tiny_options(3.0), seed=2)
    encoder = read_bilm_encoder(options_file, weights_file)
    write_pair(encoder, tmp_path / "b")
    with (
        h5py.File(weights_file, "r") as original,
        h5py.File(tmp_path / "b" / "weights.hdf5", "r") as copy,
    ):
        names = []
        original.visititems(
            lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None
        )
        assert sorted(names) == sorted(weight_arrays(encoder))
        for name in names:
            assert numpy.array_equal(original[name][...], copy[name][...]), name
    written = json.loads((tmp_path / "b" / "options.json").read_text())
    assert written["lstm"]["cell_clip"] == 3.0 and written["lstm"]["use_skip_connections"] is True
    assert written["char_cnn"]["filters"] == tiny_options(3.0)["char_cnn"]["filters"]


def test_tensorflow_conventions_on_single_values(tmp_path):
    """Each convention checked on a known entry, not only end to end."""
    encoder = random_encoder(None)
    arrays = weight_arrays(encoder)
    cnn, lstm = encoder.char_cnn, encoder.contextualizer.forward_layers[0]
    cells, proj, filters = 24, 16, 36
    # char id i + 1 is row i
    assert numpy.allclose(arrays["char_embed"][41], cnn.char_embedding.weight[42].detach().numpy())
    # conv (count, E, width) <-> (1, width, E, count)
    assert arrays["CNN/W_cnn_3"][0, 4, 7, 15] == cnn.convolutions[3].weight[15, 7, 4].item()
    # highway carry: sign flipped and transposed
    highway = cnn.highways._layers[0]
    assert arrays["CNN_high_0/W_carry"][2, 5] == -highway.weight[filters + 5, 2].item()
    assert arrays["CNN_high_0/b_carry"][5] == -highway.bias[filters + 5].item()
    # LSTM: gate j (candidate) is TF block 1 and torch block 2; input rows then recurrent rows
    w0 = arrays["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"]
    assert w0[3, cells + 1] == lstm.weight_ih_l0[2 * cells + 1, 3].item()
    assert w0[proj + 3, 2 * cells + 1] == lstm.weight_hh_l0[cells + 1, 3].item()
    bias = arrays["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/B"]
    torch_forget = (lstm.bias_ih_l0 + lstm.bias_hh_l0)[cells + 1].item()
    assert bias[2 * cells + 1] == pytest.approx(torch_forget - 1.0, abs=1e-6)  # no +1.0 stored


# ---------------------------------------------------------------------------------------------
# softmax.hdf5 + vocab.txt
# ---------------------------------------------------------------------------------------------

TOKENS = ["<S>", "</S>", "the", "cat", "sat", "on", "mat", "."]


def tiny_bilm(vocab: Vocabulary, num_samples: Optional[int] = None, sparse: bool = False, **kwargs):
    options = tiny_options(3.0)
    params = {
        "type": "elmo_bilm",
        "text_field_embedder": {
            "token_embedders": {
                "elmo": {
                    "type": "elmo_char_cnn",
                    "filters": options["char_cnn"]["filters"],
                    "num_highway": 2,
                    "projection_dim": 16,
                    "embedding_dim": 8,
                },
                "tokens": {"type": "empty"},
            }
        },
        "contextualizer": {
            "type": "elmo_lstm",
            "input_dim": 16,
            "cell_size": 24,
            "num_layers": 2,
            "cell_clip": 3,
            "proj_clip": 3,
        },
        "num_samples": num_samples,
        "sparse_embeddings": sparse,
        **kwargs,
    }
    return Model.from_params(Params(params), vocab=vocab)


def vocab_of(tokens) -> Vocabulary:
    vocab = Vocabulary()
    for token in tokens:
        vocab.add_token_to_namespace(token)
    return vocab


def batch_for(vocab: Vocabulary, sentences):
    from allennlp.data import Batch, Instance, Token
    from allennlp.data.fields import TextField
    from allennlp.data.token_indexers import SingleIdTokenIndexer

    from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer

    indexers = {"tokens": SingleIdTokenIndexer(), "elmo": ElmoCharIdsIndexer()}
    instances = [
        Instance({"source": TextField([Token(t) for t in ["<S>", *s, "</S>"]], indexers)})
        for s in sentences
    ]
    batch = Batch(instances)
    batch.index_instances(vocab)
    return batch.as_tensor_dict()


@pytest.mark.parametrize("num_samples,sparse", [(None, False), (3, False), (3, True)])
def test_softmax_export_and_import_map_rows_by_token(tmp_path, num_samples, sparse):
    source = tiny_bilm(vocab_of(TOKENS), num_samples, sparse)
    export_softmax(
        *source.softmax_matrices(),
        source.softmax_tokens(),
        str(tmp_path / "softmax.hdf5"),
        str(tmp_path / "vocab.txt"),
    )
    lines = (tmp_path / "vocab.txt").read_text().splitlines()
    assert lines == ["<UNK>", *TOKENS]  # line i = vocabulary index i + 1 = softmax row i
    weight, bias = source.softmax_matrices()
    with h5py.File(tmp_path / "softmax.hdf5", "r") as softmax:
        assert softmax["weight"].shape == (len(lines), 16) and softmax["bias"].shape == (
            len(lines),
        )
        assert numpy.array_equal(softmax["weight"][...], weight[: len(lines)].detach().numpy())
    # a model whose vocabulary orders the tokens differently and has one the file lacks
    shuffled = ["mat", "dog", ".", "the", "<S>", "sat", "</S>", "on", "cat"]
    target = tiny_bilm(vocab_of(shuffled), num_samples, sparse)
    import_softmax(
        *target.softmax_matrices(),
        target.vocab.get_token_to_index_vocabulary(),
        str(tmp_path / "softmax.hdf5"),
        str(tmp_path / "vocab.txt"),
    )
    new_weight, new_bias = target.softmax_matrices()
    for token in ["@@UNKNOWN@@", *TOKENS]:
        old_row = source.vocab.get_token_index(token) - 1
        new_row = target.vocab.get_token_index(token) - 1
        assert (
            torch.equal(new_weight[new_row], weight[old_row]) and new_bias[new_row] == bias[old_row]
        )
    assert new_bias[-1] == NO_TOKEN_BIAS  # the row past the vocabulary scores no token


def test_import_gives_the_original_models_loss(tmp_path):
    """elmo_bilm(pretrained_file=exported folder) computes the original model's losses."""
    original = tiny_bilm(vocab_of(TOKENS)).eval()
    with torch.no_grad():
        for parameter in original.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
        original.softmax_matrices()[1][-1] = NO_TOKEN_BIAS
    folder = tmp_path / "files"
    folder.mkdir()
    write_pair(original.bilm_encoder(), folder)
    export_softmax(
        *original.softmax_matrices(),
        original.softmax_tokens(),
        str(folder / "softmax.hdf5"),
        str(folder / "vocab.txt"),
    )
    from elmo_plugin.data.elmo_tokens_vocabulary import ElmoTokensVocabulary

    vocab = ElmoTokensVocabulary.from_elmo_tokens_file(str(folder / "vocab.txt"))
    imported = tiny_bilm(vocab, pretrained_file=str(folder)).eval()
    batch = batch_for(original.vocab, [["the", "cat", "sat"], ["on", "the", "mat", ".", "dog"]])
    with torch.no_grad():
        expected, actual = original(**batch), imported(**batch)
    for key in ("forward_loss", "backward_loss"):
        assert float(actual[key]) == pytest.approx(float(expected[key]), rel=1e-6)


def test_configured_architecture_must_match_options(tmp_path):
    original = tiny_bilm(vocab_of(TOKENS))
    write_pair(original.bilm_encoder(), tmp_path)
    options = json.loads((tmp_path / "options.json").read_text())
    options["lstm"]["dim"] = 32
    options["char_cnn"]["n_highway"] = 1
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(ConfigurationError) as error:
        tiny_bilm(vocab_of(TOKENS), pretrained_file=str(tmp_path))
    message = str(error.value)
    assert str(tmp_path / "options.json") in message
    assert "lstm.dim: config 24 vs options file 32" in message and "char_cnn.n_highway" in message


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def good_pair(tmp_path):
    return write_pair(random_encoder(3.0), tmp_path / "good")


def test_missing_files_name_the_path(tmp_path, good_pair):
    options_file, weights_file = good_pair
    with pytest.raises(ConfigurationError, match="options file not found: .*nowhere.json"):
        read_bilm_encoder(str(tmp_path / "nowhere.json"), weights_file)
    with pytest.raises(ConfigurationError, match="weights file not found: .*nowhere.hdf5"):
        read_bilm_encoder(options_file, str(tmp_path / "nowhere.hdf5"))


def test_options_that_do_not_match_weights_name_file_dataset_and_shapes(tmp_path, good_pair):
    options_file, weights_file = good_pair
    options = json.loads(Path(options_file).read_text())
    options["char_cnn"]["filters"][3] = [5, 12]
    options["lstm"]["dim"] = 20
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(options))
    with pytest.raises(ConfigurationError) as error:
        read_bilm_encoder(str(changed), weights_file)
    message = str(error.value)
    assert weights_file in message and "CNN/W_cnn_3" in message
    assert "(1, 5, 8, 16)" in message and "(1, 5, 8, 12)" in message and str(changed) in message
    options = json.loads(Path(options_file).read_text())
    options["lstm"]["dim"] = 20
    changed.write_text(json.dumps(options))
    with pytest.raises(
        ConfigurationError,
        match=r"RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0 has shape \(32, 96\) .* \(32, 80\)",
    ):
        read_bilm_encoder(str(changed), weights_file)
    options = json.loads(Path(options_file).read_text())
    options["char_cnn"]["n_highway"] = 3
    changed.write_text(json.dumps(options))
    with pytest.raises(ConfigurationError, match="dataset CNN_high_2/W_transform is missing"):
        read_bilm_encoder(str(changed), weights_file)


@pytest.mark.parametrize(
    "key, value, unread",
    [
        ("n_highway", 1, "CNN_high_1/W_carry"),
        ("n_layers", 1, "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/B"),
    ],
)
def test_options_with_fewer_layers_than_the_weights_name_what_is_left_out(
    tmp_path, good_pair, key, value, unread
):
    """The weights' last layer unread would change every vector without a word."""
    options_file, weights_file = good_pair
    options = json.loads(Path(options_file).read_text())
    options["char_cnn" if key == "n_highway" else "lstm"][key] = value
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(options))
    with pytest.raises(ConfigurationError) as error:
        read_bilm_encoder(str(changed), weights_file)
    assert f"{weights_file}: " in str(error.value) and f"e.g. {unread}" in str(error.value)


@pytest.mark.parametrize(
    "dataset", ["CNN_high_1/W_carry", "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"]
)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_or_inf_weights_name_file_and_dataset(tmp_path, good_pair, dataset, value):
    options_file, weights_file = good_pair
    broken = tmp_path / "broken.hdf5"
    shutil.copy(weights_file, broken)
    with h5py.File(broken, "r+") as weights:
        array = weights[dataset][...]
        array.flat[3] = value
        weights[dataset][...] = array
    with pytest.raises(ConfigurationError) as error:
        read_bilm_encoder(options_file, str(broken))
    assert (
        str(broken) in str(error.value)
        and dataset in str(error.value)
        and "NaN or inf" in str(error.value)
    )


@pytest.mark.parametrize("keep_fraction", [0.0, 0.3, 0.9])
def test_truncated_or_corrupt_hdf5_names_the_file(tmp_path, good_pair, keep_fraction):
    options_file, weights_file = good_pair
    data = Path(weights_file).read_bytes()
    broken = tmp_path / "truncated.hdf5"
    broken.write_bytes(
        data[: int(len(data) * keep_fraction)] if keep_fraction else b"not hdf5 at all\n" * 10
    )
    with pytest.raises(ConfigurationError) as error:
        read_bilm_encoder(options_file, str(broken))
    assert str(broken) in str(error.value)


def test_bad_options_json(tmp_path, good_pair):
    _, weights_file = good_pair
    bad = tmp_path / "options.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigurationError, match=f"{bad}: not valid JSON"):
        read_bilm_encoder(str(bad), weights_file)
    options = tiny_options(3.0)
    options["lstm"]["use_skip_connections"] = False
    bad.write_text(json.dumps(options))
    with pytest.raises(ConfigurationError, match="use_skip_connections"):
        read_bilm_encoder(str(bad), weights_file)
    del options["lstm"]["dim"]
    bad.write_text(json.dumps(options))
    with pytest.raises(ConfigurationError, match="missing option lstm.dim"):
        read_bilm_encoder(str(bad), weights_file)


def test_writing_nan_weights_is_refused(tmp_path):
    encoder = random_encoder(3.0)
    with torch.no_grad():
        encoder.char_cnn.projection.bias[0] = float("nan")
    with pytest.raises(ConfigurationError, match="CNN_proj/b_proj holds 1 NaN"):
        write_pair(encoder, tmp_path)


def test_a_transformer_has_no_standard_layout(tmp_path):
    from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

    transformer = Seq2SeqEncoder.by_name("elmo_transformer")(
        input_dim=16, feedforward_hidden_dim=32, num_layers=1, num_attention_heads=2
    )
    encoder = BiLmEncoder(ElmoCharCnn([[1, 4]], 1, 16), transformer)
    with pytest.raises(
        ConfigurationError,
        match="ElmoTransformerContextualizer, which the standard layout has no place for",
    ):
        write_pair(encoder, tmp_path)
    assert not (tmp_path / "weights.hdf5").exists()
