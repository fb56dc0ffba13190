"""`elmo_files.source`: ELMo files in a folder under published-style names, or an [options,
weights] pair -> local paths; ambiguous folders name the folder and the files found; `elmo_bilm`
loads either."""

import numpy
import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin.elmo_files.source import ElmoSource, resolve_bilm_source
from elmo_plugin.elmo_files.weights import weight_arrays
from tests.elmo_files.elmo_reference import write_pair
from tests.elmo_files.test_elmo_files import TOKENS, tiny_bilm, vocab_of

PUBLISHED = "elmo_2x4096_512_2048cnn_2xhighway_"


@pytest.fixture()
def published(tmp_path):
    """A tiny model's files under the published download names, no vocab.txt, no softmax."""
    model = tiny_bilm(vocab_of(TOKENS))
    options, weights = write_pair(model.bilm_encoder(), tmp_path / "elmo")
    folder = tmp_path / "elmo"
    (folder / "options.json").rename(folder / f"{PUBLISHED}options.json")
    (folder / "weights.hdf5").rename(folder / f"{PUBLISHED}weights.hdf5")
    return model, folder


def test_a_folder_resolves_under_any_names(published):
    _, folder = published
    assert resolve_bilm_source(str(folder)).files == ElmoSource(
        name=str(folder),
        options_file=str(folder / f"{PUBLISHED}options.json"),
        weights_file=str(folder / f"{PUBLISHED}weights.hdf5"),
    )
    (folder / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n")
    (folder / f"{PUBLISHED}softmax.hdf5").write_bytes(b"")
    files = resolve_bilm_source(str(folder)).files
    assert files.vocab_file == str(folder / "vocab.txt")
    assert files.softmax_file == str(folder / f"{PUBLISHED}softmax.hdf5")


def test_a_pair_resolves_to_its_two_files(published):
    _, folder = published
    pair = [str(folder / f"{PUBLISHED}options.json"), str(folder / f"{PUBLISHED}weights.hdf5")]
    files = resolve_bilm_source(pair).files
    assert (files.options_file, files.weights_file) == tuple(pair)
    assert files.softmax_file is None and files.vocab_file is None


@pytest.mark.parametrize(
    "change,found",
    [
        ("second_options", f"*options.json, found 2: ['{PUBLISHED}options.json', 'options.json']"),
        ("no_weights", "*weights.hdf5, found 0: none"),
        ("two_vocabs", "*vocab.txt or none, found 2: ['my_vocab.txt', 'vocab.txt']"),
    ],
)
def test_an_ambiguous_folder_names_itself_and_the_files_found(published, change, found):
    _, folder = published
    if change == "second_options":
        (folder / "options.json").write_text("{}")
    elif change == "no_weights":
        (folder / f"{PUBLISHED}weights.hdf5").unlink()
    else:
        (folder / "vocab.txt").write_text("a\n")
        (folder / "my_vocab.txt").write_text("a\n")
    with pytest.raises(ConfigurationError) as error:
        resolve_bilm_source(str(folder))
    message = str(error.value)
    assert message.startswith(f"{folder}: an ELMo folder needs exactly one ")
    assert found in message and "(files in it: [" in message and "\n" not in message


def test_missing_sources_name_what_is_missing(tmp_path):
    with pytest.raises(ConfigurationError, match="biLM archive or folder not found: .*nowhere"):
        resolve_bilm_source(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigurationError, match="options file not found: .*nowhere"):
        resolve_bilm_source([str(tmp_path / "nowhere"), str(tmp_path)])
    with pytest.raises(ConfigurationError, match="no biLM given"):
        resolve_bilm_source("")
    with pytest.raises(ConfigurationError, match="a folder or \\[options, weights\\]"):
        resolve_bilm_source([str(tmp_path)])


def test_the_model_loads_the_same_weights_from_the_folder_and_from_the_pair(published):
    model, folder = published
    pair = [str(folder / f"{PUBLISHED}options.json"), str(folder / f"{PUBLISHED}weights.hdf5")]
    from_folder = tiny_bilm(vocab_of(TOKENS), pretrained_file=str(folder))
    from_pair = tiny_bilm(vocab_of(TOKENS), pretrained_file=pair)
    expected = weight_arrays(model.bilm_encoder())  # as stored (the LSTM biases summed)
    for loaded in (from_folder, from_pair):
        for name, value in weight_arrays(loaded.bilm_encoder()).items():
            assert numpy.allclose(value, expected[name], atol=1e-6), name
