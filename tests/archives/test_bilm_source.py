"""archives/bilm_source: one function decides the kind of a biLM source; a folder of no kind, or
of more than one, is a one-line error naming it and what it holds."""

import shutil

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.archives.bilm_source import (
    ELMO_FILES,
    MANYLANGS,
    MODEL_ARCHIVE,
    load_encoder_and_architecture,
    source_kind,
)
from elmo_plugin.archives.safe_archive import extracted_model_archive
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
    assert source_kind(str(BILM)) == MODEL_ARCHIVE
    with extracted_model_archive(str(BILM)) as folder:
        assert source_kind(folder) == MODEL_ARCHIVE
    assert source_kind(str(standard)) == source_kind(str(published)) == ELMO_FILES
    assert source_kind(str(make_manylangs_folder(tmp_path / "manylangs"))) == MANYLANGS


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
        source_kind(str(tmp_path))
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
