"""Subcommand `allennlp elmo-export ARCHIVE OUT_DIR`: our LSTM biLM -> the standard ELMo files."""

import argparse
import json
import logging
import os

from allennlp.commands.subcommand import Subcommand

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.output_paths import check_output_dir
from elmo_plugin.elmo_files.layout import OPTIONS_FILE, SOFTMAX_FILE, VOCAB_FILE, WEIGHTS_FILE
from elmo_plugin.elmo_files.options import encoder_options
from elmo_plugin.elmo_files.softmax import export_softmax
from elmo_plugin.elmo_files.weights import write_bilm_encoder

logger = logging.getLogger(__name__)


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
            help="folder to write the files to (created if missing; its parent must exist)",
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
    transformer archive are errors raised before anything is written."""
    check_output_dir(output_dir)  # before the model loads
    model = load_bilm_model(archive_file)
    encoder = model.bilm_encoder()
    encoder_options(encoder)  # the clear error for a transformer, before any output
    if not os.path.isdir(output_dir):
        os.mkdir(output_dir)
    paths = {
        name: os.path.join(output_dir, name)
        for name in (OPTIONS_FILE, WEIGHTS_FILE, VOCAB_FILE, SOFTMAX_FILE)
    }
    tokens = model.softmax_tokens()  # the row that scores no token left out
    export_softmax(*model.softmax_matrices(), tokens, paths[SOFTMAX_FILE], paths[VOCAB_FILE])
    rows = len(tokens)
    # options.json last: a folder with it is complete (the others are written atomically first)
    write_bilm_encoder(
        encoder,
        paths[OPTIONS_FILE],
        paths[WEIGHTS_FILE],
        extra_options={"bidirectional": True, "n_tokens_vocab": rows},
    )
    logger.info("exported %s to %s (%d softmax rows)", archive_file, output_dir, rows)
    return paths
