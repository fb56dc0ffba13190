"""User errors of our subcommands as one line on stderr and exit status 1, not a traceback.

allennlp's `main` lets every exception escape, so a `ConfigurationError` would print a Python
traceback; our subcommands' functions are wrapped here instead. Only errors about the user's
input are caught: a `ConfigurationError` (bad archive, corpus, option, output path) and an
`OSError` (a file that vanished, a full disk), which names its file.
"""

import argparse
import functools
import sys
from collections.abc import Callable

from allennlp.common.checks import ConfigurationError

Command = Callable[[argparse.Namespace], None]


def one_line(error: BaseException, name: str = "") -> str:
    """The error's message on one line, without a leading `NAME: ` (the line names the command
    already)."""
    message = " ".join(str(error).split())
    return message.removeprefix(f"{name}: ") if name else message


def reports_errors(name: str) -> Callable[[Command], Command]:
    """Decorates a subcommand's `func`: its user errors end the process with
    `allennlp NAME: error: MESSAGE` (one line) and exit status 1."""

    def decorate(command: Command) -> Command:
        @functools.wraps(command)
        def run(args: argparse.Namespace) -> None:
            try:
                command(args)
            except (ConfigurationError, OSError) as error:
                sys.exit(f"allennlp {name}: error: {one_line(error, name)}")

        return run

    return decorate
