"""Subcommand `allennlp elmo-export ARCHIVE OUT_DIR`: our LSTM biLM -> the standard ELMo files."""

import argparse
import contextlib
import json
import logging
import os

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.output_paths import check_not_an_input, check_output_dir
from elmo_plugin.data.output_file import check_output_target, output_lock
from elmo_plugin.elmo_files.layout import OPTIONS_FILE, SOFTMAX_FILE, VOCAB_FILE, WEIGHTS_FILE
from elmo_plugin.elmo_files.options import encoder_options
from elmo_plugin.elmo_files.softmax import export_softmax
from elmo_plugin.elmo_files.source import ELMO_FILES, folder_marks, shown
from elmo_plugin.elmo_files.weights import write_bilm_encoder

logger = logging.getLogger(__name__)

EXPORTED_FILES = (OPTIONS_FILE, WEIGHTS_FILE, VOCAB_FILE, SOFTMAX_FILE)
LOCK_FILE = ".elmo_export.lock"  # held in OUT_DIR while an export writes it (`output_lock`)


@Subcommand.register("elmo-export")
class ElmoExport(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Export an elmo_bilm archive (LSTM contextualizer) as the standard ELMo files: "
            "options.json, weights.hdf5, vocab.txt (line i = softmax row i) and softmax.hdf5 "
            "(weight (V, P), bias (V,)). allennlp's Elmo / elmo_token_embedder read the first two."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Export a biLM as ELMo files."
        )
        subparser.add_argument(
            "archive_file", type=str, help="model.tar.gz (or serialization folder) of an elmo_bilm"
        )
        subparser.add_argument(
            "output_dir",
            type=str,
            help="folder to write the files to (created if missing; its parent must exist). An "
            "earlier export's four files in it are replaced; a folder holding another ELMo's "
            "files (any other *options.json, *weights.hdf5, *vocab.txt, *softmax.hdf5) or another "
            "kind of model is refused, as it could not be read afterwards",
        )
        subparser.set_defaults(func=_export_from_args)
        return subparser


@reports_errors("elmo-export")
def _export_from_args(args: argparse.Namespace) -> None:
    written = export_archive(args.archive_file, args.output_dir)
    print(json.dumps(written, indent=2))


def export_archive(archive_file: str, output_dir: str) -> dict[str, str]:
    """Writes the four files, each under a temporary name renamed when complete; returns
    {file name: path}. OUT_DIR is created if missing, its parent never; a bad output folder and a
    transformer archive are errors raised before anything is written, and so are a folder or
    device at one of the four names and a folder that holds another ELMo (`check_no_other_elmo`).
    An earlier export's options.json is removed first, so a folder left by an export stopped
    midway never reads as complete; a second export into the same folder meanwhile is refused
    (`output_lock`)."""
    check_output_dir(output_dir)  # before the model loads
    written = [output_dir, *(os.path.join(output_dir, name) for name in EXPORTED_FILES)]
    for path in written[1:]:  # a folder, device or link to one where a file goes
        check_output_target(path, path)
    check_not_an_input(written, {archive_file: "model"})
    check_no_other_elmo(output_dir)
    model = load_bilm_model(archive_file)
    encoder = model.bilm_encoder()
    encoder_options(encoder)  # the clear error for a transformer, before any output
    with contextlib.suppress(FileExistsError):  # another export may have made it meanwhile
        os.mkdir(output_dir)
    paths = {name: os.path.join(output_dir, name) for name in EXPORTED_FILES}
    with output_lock(output_dir, os.path.join(output_dir, LOCK_FILE)):
        if os.path.exists(paths[OPTIONS_FILE]):  # an earlier export's: incomplete from now on
            os.remove(paths[OPTIONS_FILE])
        tokens = model.softmax_tokens()  # the row that scores no token left out
        export_softmax(*model.softmax_matrices(), tokens, paths[SOFTMAX_FILE], paths[VOCAB_FILE])
        rows = len(tokens)
        # options.json last: a folder with it is complete (the others are written atomically)
        write_bilm_encoder(
            encoder,
            paths[OPTIONS_FILE],
            paths[WEIGHTS_FILE],
            extra_options={"bidirectional": True, "n_tokens_vocab": rows},
        )
    logger.info("exported %s to %s (%d softmax rows)", archive_file, output_dir, rows)
    return paths


def check_no_other_elmo(output_dir: str) -> None:
    """An error naming the files when OUT_DIR holds any that would make it unreadable as one ELMo
    once the four files are written: another `*options.json`, `*weights.hdf5`, `*vocab.txt` or
    `*softmax.hdf5` than the four (an earlier export's, replaced). Or another kind of biLM
    folder's files (a model archive's `config.json`, an ELMoForManyLangs model)."""
    if not os.path.isdir(output_dir):
        return
    names = [name for name in os.listdir(output_dir) if not name.startswith(".")]
    clashes = {name for name in names if name.endswith(EXPORTED_FILES)} - set(EXPORTED_FILES)
    other_kinds = folder_marks(output_dir)
    other_kinds.pop(ELMO_FILES, None)
    clashes.update(name for found in other_kinds.values() for name in found)
    if clashes:
        raise ConfigurationError(
            f"{output_dir} already holds {shown(sorted(clashes))}: with the exported "
            f"{', '.join(EXPORTED_FILES)} beside them no reader could tell which ELMo the folder "
            "is; export into a new or empty folder (an earlier export's four files are replaced)"
        )
