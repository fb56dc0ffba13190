"""archives/safe_archive: hostile model archives are refused before anything is extracted."""

import tarfile

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.archives.bilm_source import load_encoder_and_architecture
from elmo_plugin.archives.safe_archive import UnsafeArchiveError, extracted_model_archive
from tests.helpers import REPO_ROOT, copy_archive_with, tar_member

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
    archive = copy_archive_with(BILM, tmp_path / "model.tar.gz", extra=member)
    for load in (load_bilm_model, load_encoder_and_architecture):
        with pytest.raises(UnsafeArchiveError) as error:
            load(str(archive))
        assert (
            str(archive) in str(error.value)
            and repr(member.name) in str(error.value)
            and reason in str(error.value)
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.tar.gz"]


@pytest.mark.parametrize(
    "drop, message", [("config.json", "no config.json"), ("weights.th", "no model weights")]
)
def test_an_archive_without_config_or_weights_is_an_error_naming_it(tmp_path, drop, message):
    archive = copy_archive_with(BILM, tmp_path / "model.tar.gz", drop=drop)
    with pytest.raises(ConfigurationError, match=f"{archive}: {message}"):
        load_bilm_model(str(archive))


def test_a_serialization_folder_without_weights_is_an_error_naming_it(tmp_path):
    with extracted_model_archive(str(BILM)) as folder:
        (tmp_path / "config.json").write_bytes((REPO_ROOT / folder / "config.json").read_bytes())
    with pytest.raises(ConfigurationError, match=f"{tmp_path}: no model weights"):
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
