"""`allennlp SUBCOMMAND --help` of every elmo_plugin subcommand, through the real CLI."""

import re

import pytest
from allennlp.commands.subcommand import Subcommand

from tests.helpers import run_allennlp_in_process

OURS = sorted(
    name
    for name in Subcommand.list_available()
    if Subcommand.resolve_class_name(name)[0].__module__.startswith("elmo_plugin.")
)


def option_helps(help_text: str) -> list[str]:
    """The help of each option, its wrapped lines joined."""
    options = help_text.split("\noptions:")[-1].split("\noptional arguments:")[-1]
    return [" ".join(block.split()) for block in re.split(r"\n  (?=-)", options) if block.strip()]


def test_our_subcommands_are_all_checked():
    assert {"elmo-continue", "elmo-embed", "elmo-export", "elmo-plan", "elmo-vocab"} <= set(OURS)


@pytest.mark.parametrize("name", OURS)
def test_each_option_states_its_default_once_as_allennlps_formatter_writes_it(name):
    help_text = run_allennlp_in_process([name, "--help"]).stdout
    helps = option_helps(help_text)
    assert any("--include-package" in option for option in helps)  # the options were found
    for option in helps:
        assert "(default:" not in option and option.count("(default =") <= 1, option
