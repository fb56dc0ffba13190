"""archives/safe_archive: hostile model archives are refused before anything is extracted."""

import errno
import os
import tarfile
import tempfile
import zlib

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.models import Model

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.archives.bilm_source import load_encoder_and_architecture
from elmo_plugin.archives.safe_archive import UnsafeArchiveError, extracted_model_archive
from tests.helpers import REPO_ROOT, copy_archive_with, damaged_archive, tar_member

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"


def hostile_members(tmp_path):
    """(member, what the error says) for every kind of member that is refused."""
    escape = "../" * 30 + str(tmp_path / "escaped").lstrip(
        "/"
    )  # resolves to tmp_path/escaped from any folder
    return [
        (tar_member(escape, size=3), "'..' path component"),
        (tar_member(str(tmp_path / "absolute"), size=3), "absolute path"),
        (tar_member("vocabulary/link", tarfile.SYMTYPE, linkname=str(tmp_path)), "a link"),
        (tar_member("hard", tarfile.LNKTYPE, linkname="config.json"), "a link"),
        (tar_member("fifo", tarfile.FIFOTYPE), "device or fifo"),
        (tar_member("disk", tarfile.BLKTYPE), "device or fifo"),
        (tar_member("tty", tarfile.CHRTYPE), "device or fifo"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_hostile_members_are_refused_naming_archive_and_member_and_nothing_is_written(
    tmp_path, case
):
    member, reason = hostile_members(tmp_path)[case]
    archive = copy_archive_with(BILM, tmp_path / "model.tar.gz", extra=[member])
    for load in (load_bilm_model, load_encoder_and_architecture):
        with pytest.raises(UnsafeArchiveError) as error:
            load(str(archive))
        assert (
            str(archive) in str(error.value)
            and repr(member.name) in str(error.value)
            and reason in str(error.value)
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.tar.gz"]


@pytest.fixture
def temporary_folders(tmp_path, monkeypatch):
    """The folder tempfile makes its folders in, for this test alone: what is left there shows."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def archive_folders_left(folder) -> list:
    return sorted(path.name for path in folder.glob("elmo_plugin_archive_*"))


@pytest.mark.parametrize(
    "drop, message",
    [
        ("config.json", "no config.json"),
        ("weights.th", "no model weights"),
        ("vocabulary", "no vocabulary/ folder"),
    ],
)
def test_an_archive_without_config_weights_or_vocabulary_is_an_error_naming_it(
    tmp_path, drop, message
):
    archive = copy_archive_with(BILM, tmp_path / "model.tar.gz", drop=drop)
    with pytest.raises(ConfigurationError, match=f"{archive}: {message}"):
        load_bilm_model(str(archive))


@pytest.mark.parametrize(
    "damage, message",
    [
        ("bytes at 10%", "damaged model archive, unreadable from member 'weights.th' on (CRC"),
        ("bytes at 30%", "damaged model archive, unreadable from member 'weights.th' on (CRC"),
        ("bytes at 80%", "damaged model archive, unreadable from member 'weights.th' on (CRC"),
        ("truncated", "damaged model archive, unreadable from member 'weights.th' on (Compressed"),
        (
            "header of vocabulary/non_padded_namespaces.txt",
            "damaged model archive, unreadable from member 'vocabulary/.lock' on (a damaged member "
            "header)",
        ),
        ("bytes at 300", "not a readable model archive (zlib error: "),  # in config.json's
    ],
)
def test_a_damaged_archive_is_one_line_naming_it_and_where_it_breaks_and_nothing_is_left(
    tmp_path, temporary_folders, damage, message
):
    archive = damaged_archive(BILM, tmp_path / "model.tar.gz", damage)
    for load in (load_bilm_model, load_encoder_and_architecture):
        with pytest.raises(ConfigurationError) as error:
            load(str(archive))
        assert str(error.value).startswith(f"{archive}: {message}"), str(error.value)
        assert "\n" not in str(error.value)
    assert archive_folders_left(temporary_folders) == []


@pytest.mark.parametrize(
    "failure, raised, message",
    [
        (
            OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/elmo_plugin_archive_x/w"),
            ConfigurationError,
            "cannot extract into a temporary folder in {tmp} (No space left on device)",
        ),
        (zlib.error("invalid code lengths set"), ConfigurationError, "damaged model archive"),
        (KeyboardInterrupt(), KeyboardInterrupt, None),  # raised as it is, cleaned up too
    ],
    ids=["no room", "damaged data", "interrupted"],
)
def test_an_extraction_that_fails_names_the_archive_and_leaves_no_temporary_folder(
    temporary_folders, monkeypatch, failure, raised, message
):
    def extract_then_fail(self, path, *args, **kwargs):
        with open(os.path.join(path, "weights.th"), "wb") as partial:
            partial.write(b"part of it")
        raise failure

    monkeypatch.setattr(tarfile.TarFile, "extractall", extract_then_fail)
    with pytest.raises(raised) as error:
        load_bilm_model(str(BILM))
    if message is not None:
        assert str(error.value).startswith(f"{BILM}: {message.format(tmp=temporary_folders)}")
        assert "elmo_plugin_archive_" not in str(error.value)
    assert archive_folders_left(temporary_folders) == []


def test_a_file_that_load_archive_misses_is_named_as_the_archives_member(
    tmp_path, temporary_folders
):
    member = "vocabulary/non_padded_namespaces.txt"
    archive = copy_archive_with(BILM, tmp_path / "model.tar.gz", drop=member)
    with pytest.raises(ConfigurationError) as error:
        load_bilm_model(str(archive))
    assert str(error.value).startswith(f"{archive}: cannot load the model: ")
    assert str(error.value).endswith(f"{member!r}") and "elmo_plugin_archive_" not in str(
        error.value
    )
    assert archive_folders_left(temporary_folders) == []


@pytest.mark.parametrize(
    "files, message",
    [
        (["config.json"], "no model weights"),
        (["config.json", "weights.th"], "cannot load the model: "),  # no vocabulary/
    ],
)
def test_a_serialization_folder_without_weights_or_vocabulary_is_an_error_naming_it(
    tmp_path, files, message
):
    with extracted_model_archive(str(BILM)) as folder:
        for name in files:
            (tmp_path / name).write_bytes((REPO_ROOT / folder / name).read_bytes())
    with pytest.raises(ConfigurationError, match=f"{tmp_path}: {message}"):
        load_bilm_model(str(tmp_path))


def test_a_checked_archive_loads_the_same_model_as_its_extracted_folder(tmp_path):
    with extracted_model_archive(str(BILM)) as folder:
        from_folder = load_bilm_model(folder).state_dict()
    extracted = folder
    from_archive = load_bilm_model(str(BILM)).state_dict()
    assert from_archive.keys() == from_folder.keys()
    assert all(torch.equal(from_archive[key], from_folder[key]) for key in from_archive)
    assert not __import__("os").path.exists(extracted)  # the temporary folder is removed


def test_a_damaged_weights_file_is_one_error_naming_the_archive(tmp_path):
    damaged = tmp_path / "weights.th"
    damaged.write_bytes(b"not a torch file")
    source = copy_archive_with(BILM, tmp_path / "without.tar.gz", drop="weights.th")
    with tarfile.open(source) as original, tarfile.open(tmp_path / "model.tar.gz", "w:gz") as copy:
        for member in original.getmembers():
            copy.addfile(member, original.extractfile(member) if member.isfile() else None)
        copy.add(damaged, "weights.th")
    with pytest.raises(
        ConfigurationError, match=f"{tmp_path / 'model.tar.gz'}: cannot load the model"
    ):
        load_bilm_model(str(tmp_path / "model.tar.gz"))


def test_allennlps_own_load_archive_checks_every_member_and_leaves_no_folder(
    tmp_path, temporary_folders
):
    """Importing elmo_plugin puts the checked extraction in place of allennlp's
    `extracted_archive`: `Model.from_archive` (`load_archive`) refuses what our loaders refuse."""
    member = tar_member(str(tmp_path / "absolute"), size=3)
    archive = copy_archive_with(BILM, tmp_path / "model.tar.gz", extra=[member])
    with pytest.raises(UnsafeArchiveError, match=f"{archive}: refusing .* an absolute path"):
        Model.from_archive(str(archive))
    assert list(temporary_folders.iterdir()) == []
