"""`allennlp predict`'s `--output-file` checked before the model loads, locked, and written whole
or not at all; its input read as our commands read text, and an input line a predictor refuses
named by file:line. Importing elmo_plugin puts `PartialOutputPredictManager` in place of
allennlp's `_PredictManager` and `output_checked_first` around its `_get_predictor`, for every
predictor (allennlp binds `predict` before it imports plugins, so no registered subcommand can
replace it). Listed in docs/security.md."""

import argparse
import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any, Optional

from allennlp.commands import predict
from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path, open_compressed
from allennlp.common.util import JsonDict
from allennlp.predictors.predictor import Predictor

from elmo_plugin.commands.output_paths import check_not_an_input, check_output_file
from elmo_plugin.data.corpus_stats import (
    CorpusStats,
    checked_text,
    decode_line,
    warn_invalid_utf8,
)
from elmo_plugin.data.output_file import LOCK_SUFFIX, OutputFile, output_lock

logger = logging.getLogger(__name__)

COMMAND = "allennlp predict"
# --output-file -> its lock, taken before the model loads and released by the manager's run
HELD_LOCKS: dict[str, contextlib.ExitStack] = {}


def one_line(error: ConfigurationError) -> SystemExit:
    """`allennlp predict: error: MESSAGE` (a reader's message names the command once)."""
    return SystemExit(f"allennlp predict: error: {str(error).removeprefix(f'{COMMAND}: ')}")


def output_checked_first(get_predictor: Callable[[argparse.Namespace], Predictor]):
    """allennlp's `_get_predictor`, after `--output-file` is checked (its folder, not a folder or
    device, not the input, the model or its weights file) and locked: a second run on it is
    refused."""

    @functools.wraps(get_predictor)
    def checked(args: argparse.Namespace) -> Predictor:
        if args.output_file is None:
            return get_predictor(args)
        held = contextlib.ExitStack()
        try:
            check_output_file(args.output_file)
            inputs = {args.input_file: "input file", args.archive_file: "model"}
            if args.weights_file:
                inputs[args.weights_file] = "weights file"
            check_not_an_input([args.output_file], inputs)
            lock = args.output_file + LOCK_SUFFIX
            held.enter_context(output_lock(args.output_file, lock))
        except ConfigurationError as error:
            raise one_line(error) from None
        try:
            predictor = get_predictor(args)
        except BaseException:
            held.close()
            raise
        HELD_LOCKS[args.output_file] = held
        return predictor

    return checked


class PartialOutputPredictManager(predict._PredictManager):
    """allennlp's manager, but the predictions go to an `OutputFile`, renamed to `OUTPUT` once
    every input line is predicted and removed when the command stops first; the lock taken by
    `output_checked_first` is released at the end. Input lines are decoded as our commands decode
    text (invalid UTF-8 replaced, with a warning naming file:line; a file that is not text is an
    error). A `ConfigurationError` from the predictor's `load_line` (ours: a line that is not a
    sentence) ends the command with `allennlp predict: error: FILE:LINE: ...`, exit status 1."""

    def __init__(
        self, predictor: Predictor, input_file: str, output_file: Optional[str], *args: Any
    ) -> None:
        self._held = HELD_LOCKS.pop(output_file, contextlib.ExitStack()) if output_file else None
        super().__init__(predictor, input_file, None, *args)
        self._output = None
        if output_file is not None:
            try:
                self._output = OutputFile(output_file)
            except ConfigurationError as error:
                self._release()
                raise one_line(error) from None
            self._output_file = self._output.file  # type: ignore[assignment]  # a text file

    def _get_json_data(self) -> Iterator[JsonDict]:
        if self._input_file == "-":
            yield from self._json_lines("<stdin>", sys.stdin.buffer)
            return
        with open_compressed(cached_path(self._input_file), "rb", encoding=None) as lines:
            yield from self._json_lines(self._input_file, lines)

    def _json_lines(self, name: str, lines: Iterator[bytes]) -> Iterator[JsonDict]:
        stats = CorpusStats(files=1)
        try:
            for number, raw in enumerate(checked_text(name, lines, COMMAND), 1):
                line = decode_line(raw, name, number, stats)
                if not line.strip():
                    stats.blank_lines += 1
                    continue
                try:
                    json_dict = self._predictor.load_line(line)
                except ConfigurationError as error:
                    raise SystemExit(f"allennlp predict: error: {name}:{number}: {error}") from None
                yield json_dict
        except ConfigurationError as error:
            raise one_line(error) from None
        warn_invalid_utf8(stats.invalid_utf8_at, COMMAND)
        if stats.blank_lines:
            logger.warning(
                "%s: %d blank lines of %s skipped, as allennlp skips them: the output has a line "
                "for each other line",
                COMMAND,
                stats.blank_lines,
                name,
            )

    def run(self) -> None:
        try:
            with self._output or contextlib.nullcontext():  # an output committed when complete
                super().run()
        except ConfigurationError as error:  # a full disk, an output replaced meanwhile
            raise one_line(error) from None
        finally:
            self._release()

    def _release(self) -> None:
        if self._held is not None:
            self._held.close()


predict._PredictManager = PartialOutputPredictManager  # type: ignore[assignment, misc]
predict._get_predictor = output_checked_first(predict._get_predictor)
