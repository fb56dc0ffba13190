"""archives/: loading a biLM (encoder, model, architecture) from our archives and ELMo folders."""

import json

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.archives.bilm_source import load_bilm_encoder, load_encoder_and_architecture
from elmo_plugin.elmo_files.weights import read_bilm_encoder
from elmo_plugin.modules.bilm_encoder import current_architecture
from tests.elmo_files.elmo_reference import batches, random_encoder, with_boundaries, write_pair
from tests.helpers import REPO_ROOT

OLD = REPO_ROOT / "fixtures" / "archives_before_layering"


def test_an_archive_without_a_bilm_is_an_error_saying_what_it_holds():
    with pytest.raises(ConfigurationError, match="holds a CrfTagger model, not an ELMo biLM"):
        load_bilm_model(str(OLD / "tagger.tar.gz"))
    with pytest.raises(ConfigurationError, match="holds a 'crf_tagger' model, not an ELMo biLM"):
        load_encoder_and_architecture(str(OLD / "tagger.tar.gz"))


@pytest.mark.parametrize("bad", ["missing.tar.gz", "not_an_archive.tar.gz"])
def test_a_missing_or_unreadable_archive_is_an_error_naming_it(tmp_path, bad):
    (tmp_path / "not_an_archive.tar.gz").write_bytes(b"plain bytes")
    with pytest.raises(ConfigurationError, match=bad):
        load_encoder_and_architecture(str(tmp_path / bad))


def test_elmo_folder_loads_the_files_encoder(tmp_path):
    options_file, weights_file = write_pair(random_encoder(3.0), tmp_path)
    loaded, expected = (
        load_bilm_encoder(str(tmp_path)).eval(),
        read_bilm_encoder(options_file, weights_file),
    )
    char_ids = with_boundaries(batches((3,))[0])
    with torch.no_grad():
        for got, want in zip(loaded(char_ids)[0], expected(char_ids)[0], strict=True):
            assert torch.equal(got, want)


def test_old_keys_are_renamed_and_dropout_is_zero_in_the_recorded_architecture():
    architecture = load_encoder_and_architecture(str(OLD / "bilm_lstm.tar.gz"))[1]
    assert (
        architecture["contextualizer"]["cell_size"] == 32
        and "hidden_dim" not in architecture["contextualizer"]
    )
    assert architecture["contextualizer"]["dropout"] == 0.0
    transformer = load_encoder_and_architecture(str(OLD / "bilm_transformer.tar.gz"))[1][
        "contextualizer"
    ]
    assert (
        transformer["feedforward_hidden_dim"] == 32
        and transformer["dropout"] == transformer["input_dropout"] == 0.0
    )
    assert current_architecture({"contextualizer": {"type": "elmo_lstm", "cell_size": 4}}) == {
        "contextualizer": {"type": "elmo_lstm", "cell_size": 4}
    }


@pytest.mark.parametrize("archive", ["bilm_lstm.tar.gz", "bilm_transformer.tar.gz"])
def test_rebuilt_encoder_gives_the_archived_models_layers(archive):
    """The encoder rebuilt from the recorded architecture (what a downstream archive rebuilds)
    computes what the archived model's own encoder computes, in eval mode."""
    encoder, architecture = load_encoder_and_architecture(str(OLD / archive))
    assert json.loads(json.dumps(architecture)) == architecture  # travels as JSON
    model = load_archive(str(OLD / archive)).model.eval()
    char_ids = with_boundaries(batches((3,))[0])
    with torch.no_grad():
        for got, want in zip(encoder(char_ids)[0], model.bilm_encoder()(char_ids)[0], strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_asking_for_a_gpu_torch_does_not_see_is_a_configuration_error_before_loading():
    with pytest.raises(ConfigurationError, match="GPU device 99|none is available"):
        load_bilm_encoder(str(OLD / "missing.tar.gz"), cuda_device=99)  # never opened
