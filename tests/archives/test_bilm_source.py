"""One function decides the kind of a biLM source (`resolve_bilm_source`) and one loader per kind
reads it (`archives.bilm_source`); a folder of no kind, or of more than one, is a one-line error
naming it and what it holds; an archive is extracted once and its softmax never built."""

import json
import shutil
import tarfile

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.archives.bilm_source import load_encoder_and_architecture
from elmo_plugin.archives.safe_archive import extracted_model_archive
from elmo_plugin.commands.elmo_continue import DEFAULT_CONFIG, continue_overrides
from elmo_plugin.elmo_files.pretrained import load_pretrained_files
from elmo_plugin.elmo_files.source import (
    ELMO_FILES,
    MANYLANGS,
    MODEL_ARCHIVE,
    resolve_bilm_source,
)
from tests.elmo_files.elmo_reference import batches, random_encoder, with_boundaries, write_pair
from tests.elmo_files.manylangs_reference import make_manylangs_folder
from tests.helpers import REPO_ROOT

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
PUBLISHED = "elmo_2x16_24_cnn_1xhighway_"  # as the published downloads prefix their files


def published_folder(tmp_path):
    """A random encoder's files in `standard/` (options.json, weights.hdf5) and the same files
    named as the published downloads are in `published/`."""
    write_pair(random_encoder(3.0), tmp_path / "standard")
    (tmp_path / "published").mkdir()
    for name in ("options.json", "weights.hdf5"):
        shutil.copy(tmp_path / "standard" / name, tmp_path / "published" / (PUBLISHED + name))
    return tmp_path / "standard", tmp_path / "published"


def test_each_kind_of_source_is_recognized(tmp_path):
    standard, published = published_folder(tmp_path)

    def kind(given):
        return resolve_bilm_source(given).kind

    assert kind(str(BILM)) == MODEL_ARCHIVE
    with extracted_model_archive(str(BILM)) as folder:
        assert kind(folder) == MODEL_ARCHIVE
    assert kind(str(standard)) == kind(str(published)) == ELMO_FILES
    assert kind([str(standard / "options.json"), str(standard / "weights.hdf5")]) == ELMO_FILES
    assert kind(str(make_manylangs_folder(tmp_path / "manylangs"))) == MANYLANGS


def test_a_folder_named_as_the_published_files_loads_the_same_encoder(tmp_path):
    standard, published = published_folder(tmp_path)
    ours, architecture = load_encoder_and_architecture(str(standard))
    theirs, same_architecture = load_encoder_and_architecture(str(published))
    assert architecture == same_architecture and architecture["token_embedder"]["num_characters"]
    char_ids = with_boundaries(batches((3,))[0])
    with torch.no_grad():
        for got, want in zip(theirs(char_ids)[0], ours(char_ids)[0], strict=True):
            assert torch.equal(got, want)


def test_a_folder_of_no_kind_is_a_one_line_error_naming_it_and_its_files(tmp_path):
    (tmp_path / "char.dic").write_text("a\t0\n")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigurationError) as error:
        resolve_bilm_source(str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"{tmp_path}: neither a model archive folder (config.json), nor ")
    assert message.endswith("; it holds char.dic, notes.txt") and "\n" not in message


def test_a_folder_of_two_kinds_is_a_one_line_error_naming_what_marks_each(tmp_path):
    standard, _ = published_folder(tmp_path)
    (standard / "config.json").write_text("{}")
    with pytest.raises(ConfigurationError) as error:
        load_encoder_and_architecture(str(standard))
    assert str(error.value) == (
        f"{standard}: holds the files of more than one kind of biLM folder: {ELMO_FILES}: "
        f"options.json, weights.hdf5; {MODEL_ARCHIVE}: config.json; give a folder of one kind"
    )


def test_a_folder_with_two_options_files_names_both(tmp_path):
    standard, _ = published_folder(tmp_path)
    shutil.copy(standard / "options.json", standard / (PUBLISHED + "options.json"))
    with pytest.raises(ConfigurationError, match=r"exactly one \*options.json, found 2"):
        load_encoder_and_architecture(str(standard))


def test_an_archive_is_extracted_once_and_no_model_or_softmax_is_built(monkeypatch):
    """The encoder comes from the recorded architecture and the archived weights alone, equal to
    the encoder of the model allennlp's `load_archive` builds."""
    expected = load_archive(str(BILM)).model.bilm_encoder().state_dict()
    extractions = []
    extractall = tarfile.TarFile.extractall

    def counted(self, *args, **kwargs):
        extractions.append(args)
        return extractall(self, *args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("a language model (and its softmax) was built")

    monkeypatch.setattr(tarfile.TarFile, "extractall", counted)
    monkeypatch.setattr(LanguageModel, "__init__", refused)
    state = load_encoder_and_architecture(str(BILM))[0].state_dict()
    assert len(extractions) == 1
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[key], expected[key]) for key in state)


def test_weights_that_do_not_fit_the_recorded_architecture_are_one_line_naming_the_folder(
    tmp_path,
):
    with extracted_model_archive(str(BILM)) as folder:
        shutil.copytree(folder, tmp_path / "run")
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    config["model"]["contextualizer"]["num_layers"] = 3
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigurationError) as error:
        load_encoder_and_architecture(str(tmp_path / "run"))
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'run'}: its weights do not fit the biLM its config")
    assert "forward_layers.2" in message and "\n" not in message


def test_each_command_names_a_source_of_a_kind_it_does_not_take(tmp_path):
    standard, _ = published_folder(tmp_path)
    with pytest.raises(ConfigurationError, match=f"{standard} is an ELMo files folder .*, not a"):
        load_bilm_model(str(standard))
    with pytest.raises(ConfigurationError, match=f"pretrained_file: {BILM} is a model archive"):
        load_pretrained_files(str(BILM), None, None, {})  # refused before anything is read
    with pytest.raises(ConfigurationError, match=f"elmo-continue: {BILM} is a model archive"):
        continue_overrides(str(BILM), DEFAULT_CONFIG, "train.txt", "valid.txt")
