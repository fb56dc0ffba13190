"""`python -m elmo_plugin.commands.register_plugin` (`make install`, where allennlp's global
plugins file does not list the plugin yet): lists elmo_plugin once, keeping the other plugins."""

import runpy

import pytest
from allennlp.common import plugins

from elmo_plugin.commands.register_plugin import register


def test_register_appends_the_plugin_once_and_keeps_the_other_lines(tmp_path):
    plugins_file = tmp_path / "plugins"
    plugins_file.write_text("other_plugin\n")
    assert register(str(plugins_file)) is True
    assert register(str(plugins_file)) is False
    assert plugins_file.read_text() == "other_plugin\nelmo_plugin\n"


def test_a_last_line_without_its_newline_keeps_its_plugin(tmp_path):
    plugins_file = tmp_path / "plugins"
    plugins_file.write_text("other_plugin")
    assert register(str(plugins_file)) is True
    assert plugins_file.read_text() == "other_plugin\nelmo_plugin\n"


@pytest.mark.filterwarnings("ignore:'elmo_plugin.commands.register_plugin' found in sys.modules")
def test_the_module_creates_the_global_file_and_says_what_it_did(tmp_path, monkeypatch, capsys):
    plugins_file = tmp_path / "home" / ".allennlp" / "plugins"
    monkeypatch.setattr(plugins, "GLOBAL_PLUGINS_FILENAME", str(plugins_file))
    for said in ("added to", "already in"):
        runpy.run_module("elmo_plugin.commands.register_plugin", run_name="__main__")
        assert capsys.readouterr().out == f"elmo_plugin {said} {plugins_file}\n"
    assert plugins_file.read_text() == "elmo_plugin\n"
