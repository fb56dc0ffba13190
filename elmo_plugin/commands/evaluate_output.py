"""`allennlp evaluate`'s `--output-file` and `--predictions-output-file` (or the names
`--auto-names` gives) checked before the model loads and locked while it runs, whatever the
archive's evaluator. None may be a folder or device, an evaluation data file, the model, its
`--weights-file` or another output: writing it would destroy the data or the model, or lose
metrics or predictions. Importing elmo_plugin puts `outputs_checked_first` around allennlp's
`evaluate_from_archive`, which `evaluate_from_args` looks up when it runs (allennlp binds
`evaluate_from_args` itself before it imports plugins). Listed in docs/security.md."""

import contextlib
import functools
import glob
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from allennlp.commands import evaluate
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.output_paths import check_not_an_input, check_output_file
from elmo_plugin.data.output_file import LOCK_SUFFIX, output_lock

AUTO_NAMED = {  # --auto-names -> {option: the suffix of the names it gives}
    "METRICS": {"--output-file": ".outputs"},
    "PREDS": {"--predictions-output-file": ".preds"},
    "ALL": {"--output-file": ".outputs", "--predictions-output-file": ".preds"},
}


def data_paths(input_file: str) -> list[str]:
    """The paths (or globs) evaluate reads, as allennlp splits `input_file`: a JSON list's
    strings (its objects are data, not paths), else the comma-separated parts."""
    try:
        return [item for item in json.loads(f"[{input_file}]") if isinstance(item, str)]
    except json.JSONDecodeError:
        return input_file.split(",")


def named_outputs(call: dict[str, Any]) -> list[tuple[str, str]]:
    """(option, path) of every file `evaluate_from_archive`'s arguments `call` will write."""
    data = data_paths(call["input_file"])
    auto = AUTO_NAMED.get(call["auto_names"], {})
    given = {
        "--output-file": call["metrics_output_file"],
        "--predictions-output-file": call["predictions_output_file"],
    }
    outputs = []
    for option, paths in given.items():
        if paths and option in auto:
            named = (Path(path).parent / f"{Path(path).stem}{auto[option]}" for path in data)
            outputs += [(option, str(path)) for path in named]
        elif paths:
            outputs += [(option, path) for path in paths.split(",")]
    return outputs


def check_evaluation_outputs(call: dict[str, Any]) -> list[tuple[str, str]]:
    """`named_outputs(call)`, checked: a `ConfigurationError` naming the output and what it is: a
    folder or device, in a folder that is missing or not writable (`check_output_file`), an
    evaluation data file, another output, the model or the weights file."""
    outputs = named_outputs(call)
    data = [file for part in data_paths(call["input_file"]) for file in glob.glob(part)]
    for number, (option, path) in enumerate(outputs):
        check_output_file(path)
        for file in data:
            if os.path.exists(path) and os.path.samefile(file, path):
                raise ConfigurationError(
                    f"cannot write {path}: it is the evaluation data file {file}, which writing "
                    f"it would destroy; choose another {option}"
                )
        for other, earlier in outputs[:number]:
            if os.path.realpath(path) == os.path.realpath(earlier):
                raise ConfigurationError(
                    f"cannot write {path}: it is also given to {other}, and one file would "
                    "replace the other; choose a path for each"
                )
    inputs = {str(call["archive_file"]): "model"}
    if call["weights_file"]:
        inputs[call["weights_file"]] = "weights file"
    check_not_an_input([path for _, path in outputs], inputs)
    return outputs


def outputs_checked_first(evaluate_from_archive: Callable[..., Any]):
    """allennlp's `evaluate_from_archive`, after `check_evaluation_outputs`, with each output's
    lock held (a second run on one refused); a refusal is one line, `allennlp evaluate: error:
    ...`, exit status 1."""
    signature = inspect.signature(evaluate_from_archive)

    @functools.wraps(evaluate_from_archive)
    def checked(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        with contextlib.ExitStack() as held:
            try:
                for _, path in check_evaluation_outputs(call.arguments):
                    held.enter_context(output_lock(path, path + LOCK_SUFFIX))
            except ConfigurationError as error:
                raise SystemExit(f"allennlp evaluate: error: {error}") from None
            return evaluate_from_archive(*args, **kwargs)

    return checked


evaluate.evaluate_from_archive = outputs_checked_first(evaluate.evaluate_from_archive)
