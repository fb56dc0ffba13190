"""`allennlp evaluate`'s `--output-file` and `--predictions-output-file` checked before the model
loads and locked while it runs, whatever the archive's evaluator: neither may be a folder or
device, an evaluation data file, the model, its `--weights-file` or the other option's file
(writing it would destroy the data or the model, or lose the metrics or the predictions).
Importing elmo_plugin puts `outputs_checked_first` around allennlp's `evaluate_from_args`.
Listed in docs/security.md."""

import argparse
import contextlib
import functools
import glob
import json
import os
from collections.abc import Callable
from typing import Any

from allennlp.commands import evaluate
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.output_paths import check_not_an_input, check_output_file
from elmo_plugin.data.output_file import LOCK_SUFFIX, output_lock


def named_outputs(args: argparse.Namespace) -> dict[str, list[str]]:
    """{option: its comma-separated paths}, for the options given and not replaced by
    `--auto-names`."""
    auto = {"METRICS": ["--output-file"], "PREDS": ["--predictions-output-file"]}
    auto["ALL"] = auto["METRICS"] + auto["PREDS"]
    given = {
        "--output-file": args.output_file,
        "--predictions-output-file": args.predictions_output_file,
    }
    return {
        option: paths.split(",")
        for option, paths in given.items()
        if paths and option not in auto.get(args.auto_names, [])
    }


def data_files(input_file: str) -> list[str]:
    """The files evaluate reads: its comma-separated paths or globs (not JSON objects)."""
    try:
        json.loads(f"[{input_file}]")
        return []
    except json.JSONDecodeError:
        parts = input_file.split(",")
    return [path for part in parts for path in glob.glob(part) or [part] if os.path.isfile(path)]


def check_evaluation_outputs(args: argparse.Namespace) -> None:
    """A `ConfigurationError` naming the output and what it is: a folder or device, in a folder
    that is missing or not writable (`check_output_file`), an evaluation data file, the model,
    the weights file, or the file of the other output option."""
    outputs = named_outputs(args)
    data = data_files(args.input_file)
    for option, paths in outputs.items():
        for path in paths:
            check_output_file(path)
            for file in data:
                if os.path.exists(path) and os.path.samefile(file, path):
                    raise ConfigurationError(
                        f"cannot write {path}: it is the evaluation data file {file}, which "
                        f"writing it would destroy; choose another {option}"
                    )
    metrics = outputs.get("--output-file", [])
    predictions = outputs.get("--predictions-output-file", [])
    for path in metrics:
        if any(os.path.realpath(path) == os.path.realpath(other) for other in predictions):
            raise ConfigurationError(
                f"cannot write {path}: it is both --output-file and --predictions-output-file, "
                "and one would replace the other; choose two paths"
            )
    inputs = {args.archive_file: "model"}
    if args.weights_file:
        inputs[args.weights_file] = "weights file"
    check_not_an_input(metrics + predictions, inputs)


def outputs_checked_first(evaluate_from_args: Callable[[argparse.Namespace], Any]):
    """allennlp's `evaluate_from_args`, after `check_evaluation_outputs`, with each output's lock
    held (a second run on one refused); a refusal is one line, `allennlp evaluate: error: ...`,
    exit status 1."""

    @functools.wraps(evaluate_from_args)
    def checked(args: argparse.Namespace) -> Any:
        with contextlib.ExitStack() as held:
            try:
                check_evaluation_outputs(args)
                for path in sum(named_outputs(args).values(), []):
                    held.enter_context(output_lock(path, path + LOCK_SUFFIX))
            except ConfigurationError as error:
                raise SystemExit(f"allennlp evaluate: error: {error}") from None
            return evaluate_from_args(args)

    return checked


evaluate.evaluate_from_args = outputs_checked_first(evaluate.evaluate_from_args)
