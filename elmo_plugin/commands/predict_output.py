"""`allennlp predict`'s `--output-file` written whole or not at all, and an input line a predictor
refuses named by file:line: `PartialOutputPredictManager`, which importing elmo_plugin puts in
place of allennlp's `_PredictManager` (allennlp binds `predict` before it imports plugins, so no
registered subcommand can replace it). Listed in docs/security.md."""

import sys
from collections.abc import Iterator
from typing import Any, Optional

from allennlp.commands import predict
from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path, open_compressed
from allennlp.common.util import JsonDict
from allennlp.predictors.predictor import Predictor

from elmo_plugin.data.output_file import OutputFile, user_output


class PartialOutputPredictManager(predict._PredictManager):
    """allennlp's manager, but the predictions go to an `OutputFile`, renamed to `OUTPUT` once
    every input line is predicted and removed when the command stops first. A `ConfigurationError`
    from the predictor's `load_line` (ours: a line that is not a sentence) ends the command with
    `allennlp predict: error: FILE:LINE: ...`, exit status 1."""

    def __init__(
        self, predictor: Predictor, input_file: str, output_file: Optional[str], *args: Any
    ) -> None:
        super().__init__(predictor, input_file, None, *args)
        self._output = None
        if output_file is not None:
            self._output = OutputFile(user_output(output_file), output_file)
            self._output_file = self._output.file  # type: ignore[assignment]  # a text file

    def _get_json_data(self) -> Iterator[JsonDict]:
        if self._input_file == "-":
            yield from self._json_lines("<stdin>", sys.stdin)
            return
        with open_compressed(cached_path(self._input_file)) as lines:
            yield from self._json_lines(self._input_file, lines)

    def _json_lines(self, name: str, lines: Iterator[str]) -> Iterator[JsonDict]:
        for number, line in enumerate(lines, 1):
            if line.isspace():
                continue
            try:
                json_dict = self._predictor.load_line(line)
            except ConfigurationError as error:
                raise SystemExit(f"allennlp predict: error: {name}:{number}: {error}") from None
            yield json_dict

    def run(self) -> None:
        if self._output is None:
            super().run()
            return
        with self._output:  # committed when every line is predicted, else removed
            super().run()


predict._PredictManager = PartialOutputPredictManager  # type: ignore[assignment, misc]
