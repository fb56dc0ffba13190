"""`elmo-export`: what it refuses before writing anything."""

import errno

import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands import elmo_export
from elmo_plugin.commands.elmo_export import export_archive
from tests.elmo_files.elmo_reference import transformer_bilm_folder
from tests.helpers import REPO_ROOT

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"


def test_elmo_export_refuses_a_transformer_archive(tmp_path):
    folder, _ = transformer_bilm_folder(tmp_path / "bilm")
    with pytest.raises(
        ConfigurationError,
        match="ElmoTransformerContextualizer, which the standard layout has no place for",
    ):
        export_archive(str(folder), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_export_stopped_midway_over_an_earlier_one_leaves_no_options_json(tmp_path, monkeypatch):
    """options.json marks a complete folder: the earlier export's goes before any file is
    replaced, so the old options never sit beside a new softmax and vocabulary."""
    out = tmp_path / "elmo"
    export_archive(str(BILM), str(out))
    assert (out / "options.json").is_file()

    def disk_full(*args, **kwargs):
        assert not (out / "options.json").exists()  # already gone when the first file is written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(elmo_export, "export_softmax", disk_full)
    with pytest.raises(OSError):
        export_archive(str(BILM), str(out))
    assert not (out / "options.json").exists()
