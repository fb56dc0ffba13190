"""Subcommand `allennlp elmo-continue SOURCE -s OUT`: keep pretraining a published ELMo.

It resolves what a continued run needs from SOURCE (`resolve_bilm_source`), writes it as ONE
`allennlp train -o` override JSON and runs allennlp's own training in this process. The run's
config.json records the resolved architecture and vocabulary. `-r` with the same command resumes,
and the archive loads without SOURCE (allennlp drops `model.pretrained_file` when loading).

- architecture: from the options file, as override keys of the `elmo_char_cnn` token embedder
  and the `elmo_lstm` contextualizer (an architecture key in your -o must equal the options file);
- vocabulary: `--vocabulary`, else the folder's `vocab.txt`, else counted from the training corpus
  (one log line says which);
- softmax: the folder's `*softmax.hdf5` mapped by token, else fresh (the model warns once);
- freezing: `--freeze char_cnn,lstm.0` -> allennlp's `trainer.no_grad` regexes.

A new run (no `-r`) that stops, whatever the error, before it wrote a checkpoint or metrics
removes what it wrote, so the corrected command can run in the same folder.
"""

import argparse
import fnmatch
import json
import logging
import os
import re
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from allennlp.commands.subcommand import Subcommand
from allennlp.commands.train import train_model_from_file
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.training_config import config_params, user_overrides_dict
from elmo_plugin.elmo_files.options import architecture_from_options, read_options
from elmo_plugin.elmo_files.source import (
    MANYLANGS,
    MODEL_ARCHIVE,
    SourceSpec,
    resolve_bilm_source,
)
from elmo_plugin.training.elmo_validation_checks import CHECKS_FILE

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = str(
    Path(__file__).resolve().parents[2] / "training_config" / "elmo_lstm_continue.jsonnet"
)
COUNTED_MIN_COUNT = 2  # a counted vocabulary keeps the tokens seen at least this often
CHAR_CNN_TYPE = "elmo_char_cnn"
# What to do with a source that is not ELMo files.
OTHER_KINDS = {
    MANYLANGS: "continue it with training_config/elmo_manylangs_continue.jsonnet",
    MODEL_ARCHIVE: "export it (`allennlp elmo-export`) and continue the exported folder",
}
# what a run leaves once it trained: checkpoints (what `-r` resumes from), best weights, metrics,
# validation checks, archives; a folder without any of these holds nothing worth keeping
TRAINED = (
    "model_state_e*",
    "training_state_e*",
    "best*.th",
    "metrics*.json",
    CHECKS_FILE,
    "*.tar.gz",
)


@Subcommand.register("elmo-continue")
class ElmoContinue(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Continue pretraining a published (or exported) ELMo on your text: SOURCE is a folder "
            "with one *options.json and one *weights.hdf5 (any names; optional *softmax.hdf5 and "
            "vocab.txt), or the options file with --weights-file; paths or URLs. The architecture, "
            "vocabulary, softmax and frozen layers are resolved into one `allennlp train -o` "
            "override, recorded in OUT/config.json."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Continue pretraining a published ELMo."
        )
        subparser.add_argument("source", help="ELMo folder, or the options file (--weights-file)")
        subparser.add_argument(
            "-s", "--serialization-dir", required=True, help="folder for the continued run"
        )
        subparser.add_argument("--train-data-path", required=True, help="training text (globs)")
        subparser.add_argument(
            "--validation-data-path", required=True, help="validation text (globs)"
        )
        subparser.add_argument(
            "--weights-file", default=None, help="the weights.hdf5 when SOURCE is an options file"
        )
        subparser.add_argument(
            "--vocabulary",
            default=None,
            help="ELMo tokens file (one token per line, `allennlp elmo-vocab`) to use instead of "
            "the folder's vocab.txt or a vocabulary counted from the training text",
        )
        subparser.add_argument(
            "--freeze",
            default="",
            help="comma-separated parts kept fixed: char_cnn, lstm (every layer), lstm.N (layer "
            "N, 0 = bottom)",
        )
        subparser.add_argument("--config", default=DEFAULT_CONFIG, help="training config")
        subparser.add_argument(
            "-o", "--overrides", default="", help="JSON overrides, applied after the resolved ones"
        )
        subparser.add_argument(
            "-r", "--recover", action="store_true", help="resume the run in the serialization dir"
        )
        subparser.add_argument(
            "--dry-run",
            action="store_true",
            help="print the equivalent `allennlp train` command instead of training",
        )
        subparser.set_defaults(func=continue_from_args)
        return subparser


@reports_errors("elmo-continue")
def continue_from_args(args: argparse.Namespace) -> None:
    source: SourceSpec = [args.source, args.weights_file] if args.weights_file else args.source
    overrides = continue_overrides(
        source,
        args.config,
        args.train_data_path,
        args.validation_data_path,
        vocabulary=args.vocabulary,
        freeze=args.freeze,
        user_overrides=args.overrides,
    )
    if args.dry_run:
        print(train_command(args.config, args.serialization_dir, overrides, args.recover))
        return
    # resolved as the system will (`new/../old` is `old`, existing or not)
    folder = os.path.realpath(args.serialization_dir)
    made = first_missing(folder)
    new_run = not args.recover and (made is not None or not os.listdir(folder))
    try:
        train_model_from_file(
            args.config,
            folder,
            overrides=json.dumps(overrides),
            recover=args.recover,
            include_package=list(getattr(args, "include_package", None) or []),
        )
    except BaseException:
        if new_run:
            remove_untrained_run(folder, made)
        raise


def first_missing(folder: str) -> Optional[str]:
    """The highest of `folder` (an absolute path without `..`) and its parents that does not
    exist: what `allennlp train` will make; None where `folder` exists."""
    if os.path.lexists(folder):
        return None
    while not os.path.lexists(os.path.dirname(folder)):
        folder = os.path.dirname(folder)
    return folder


def remove_untrained_run(folder: str, made: Optional[str]) -> None:
    """Removes what a new run wrote in `folder` (empty or missing before it) when it stopped
    before it wrote anything in `TRAINED`: `made`, the highest folder it made, else what
    `folder` holds."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    if any(fnmatch.fnmatch(name, pattern) for name in names for pattern in TRAINED):
        return
    if made is not None:
        if os.path.isdir(made):
            logger.info("elmo-continue: removing the stopped run's folder %s", made)
            shutil.rmtree(made)
        return
    logger.info("elmo-continue: removing the stopped run's %s from %s", sorted(names), folder)
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def continue_overrides(
    given: SourceSpec,
    config: str,
    train_data_path: str,
    validation_data_path: str,
    vocabulary: Optional[str] = None,
    freeze: str = "",
    user_overrides: str = "",
) -> dict[str, Any]:
    """The one override JSON of a continued run: the resolved keys, then the user's -o."""
    if not os.path.isfile(config):
        raise ConfigurationError(f"elmo-continue: config not found: {config} (give --config)")
    user = user_overrides_dict(user_overrides)
    source = resolve_bilm_source(given)
    if source.kind in OTHER_KINDS:
        raise ConfigurationError(
            f"elmo-continue: {source.name} is {source.kind}: {OTHER_KINDS[source.kind]}"
        )
    files = source.files
    assert files is not None  # ELMO_FILES
    architecture = architecture_from_options(read_options(files.options_file))
    char_cnn = char_cnn_name(config, config_params(config, user_overrides))
    resolved: dict[str, Any] = {
        "model.pretrained_file": given if isinstance(given, str) else list(given),
        "train_data_path": train_data_path,
        "validation_data_path": validation_data_path,
    }
    embedder = f"model.text_field_embedder.token_embedders.{char_cnn}"
    resolved.update(
        {f"{embedder}.{k}": v for k, v in architecture["token_embedder"].items() if k != "type"}
    )
    resolved.update(
        {f"model.contextualizer.{k}": v for k, v in architecture["contextualizer"].items()}
    )
    if "vocabulary" in user:
        logger.info("elmo-continue: vocabulary: as your -o states it")
    else:
        resolved["vocabulary"] = resolved_vocabulary(
            files.name, files.vocab_file, vocabulary, train_data_path
        )
    num_layers = architecture["contextualizer"]["num_layers"]
    no_grad = freeze_patterns(freeze, char_cnn, num_layers)
    if no_grad:
        resolved["trainer.no_grad"] = no_grad
        logger.info("elmo-continue: frozen (trainer.no_grad): %s", ", ".join(no_grad))
    return merge_overrides(resolved, user)


def resolved_vocabulary(
    source_name: str, folder_vocab: Optional[str], tokens_file: Optional[str], train_data_path: str
) -> dict[str, Any]:
    """The vocabulary config: the given tokens file, else the folder's vocab.txt, else counted
    from the training text; one log line says which."""
    if tokens_file is not None:
        if not os.path.isfile(tokens_file):
            raise ConfigurationError(f"elmo-continue: --vocabulary file not found: {tokens_file}")
        logger.info("elmo-continue: vocabulary: %s (--vocabulary)", tokens_file)
        return {"type": "elmo_tokens_file", "tokens_file": tokens_file}
    if folder_vocab is not None:
        logger.info("elmo-continue: vocabulary: %s (the ELMo folder's)", folder_vocab)
        return {"type": "elmo_tokens_file", "tokens_file": folder_vocab}
    logger.info(
        "elmo-continue: vocabulary: counted from the training corpus %s (tokens seen at least %d "
        "times): %s has no vocab.txt and no --vocabulary was given",
        train_data_path,
        COUNTED_MIN_COUNT,
        source_name,
    )
    return {"type": "from_instances", "min_count": {"tokens": COUNTED_MIN_COUNT}}


def char_cnn_name(config: str, params: dict[str, Any]) -> str:
    """The key of the `elmo_char_cnn` token embedder of `config` (its `params`)."""
    embedders = params.get("model", {}).get("text_field_embedder", {}).get("token_embedders", {})
    names = [name for name, embedder in embedders.items() if embedder.get("type") == CHAR_CNN_TYPE]
    if len(names) != 1:
        raise ConfigurationError(
            f"elmo-continue: {config} needs exactly one {CHAR_CNN_TYPE} token embedder under "
            f"model.text_field_embedder.token_embedders, found {names or 'none'}"
        )
    return names[0]


def freeze_patterns(freeze: str, char_cnn: str, num_layers: int) -> list[str]:
    """`char_cnn,lstm.0` -> allennlp `trainer.no_grad` regexes over the model's parameter names."""
    patterns = []
    for part in filter(None, (item.strip() for item in freeze.split(","))):
        if part == "char_cnn":
            patterns.append(rf"^_text_field_embedder\.token_embedder_{re.escape(char_cnn)}\.")
        elif part == "lstm":
            patterns.append(r"^_contextualizer\.")
        elif re.fullmatch(r"lstm\.\d+", part) and int(part[5:]) < num_layers:
            patterns.append(rf"^_contextualizer\.(forward|backward)_layers\.{int(part[5:])}\.")
        else:
            raise ConfigurationError(
                f"elmo-continue: --freeze {part!r} is not one of char_cnn, lstm, lstm.N "
                f"(N = 0..{num_layers - 1}, this model's LSTM layers)"
            )
    return patterns


def merge_overrides(resolved: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """`resolved` with each of the user's keys applied on top, as allennlp applies overrides: a
    key (dotted or not) replaces our keys at or under it, and goes into our value when one of our
    keys is above it."""
    merged = dict(resolved)
    for key, value in user.items():
        for ours in [k for k in merged if k == key or k.startswith(key + ".")]:
            del merged[ours]
        parent = next((k for k in merged if key.startswith(k + ".")), None)
        if parent is None:
            merged[key] = value
            continue
        target = merged[parent] = json.loads(json.dumps(merged[parent]))
        *path, last = key[len(parent) + 1 :].split(".")
        for step in path:
            target = target.setdefault(step, {})
        target[last] = value
    return merged


def train_command(
    config: str, serialization_dir: str, overrides: dict[str, Any], recover: bool
) -> str:
    """The `allennlp train` command line that trains the same run."""
    words: Sequence[str] = [
        "allennlp",
        "train",
        config,
        "-s",
        serialization_dir,
        "-o",
        json.dumps(overrides),
        "--include-package",
        "elmo_plugin",
        *(["-r"] if recover else []),
    ]
    return " ".join(shlex.quote(word) for word in words)
