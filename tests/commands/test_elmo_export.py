"""`elmo-export`: what it refuses before writing anything."""

import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.elmo_export import export_archive
from tests.elmo_files.elmo_reference import transformer_bilm_folder


def test_elmo_export_refuses_a_transformer_archive(tmp_path):
    folder, _ = transformer_bilm_folder(tmp_path / "bilm")
    with pytest.raises(
        ConfigurationError,
        match="ElmoTransformerContextualizer, which the standard layout has no place for",
    ):
        export_archive(str(folder), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
