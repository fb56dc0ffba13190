"""Subcommand `allennlp elmo-export ARCHIVE OUT_DIR`: our LSTM biLM -> the standard ELMo files."""
import argparse
import json
import logging
import os
from typing import Dict

from allennlp.commands.subcommand import Subcommand

logger = logging.getLogger(__name__)


@Subcommand.register("elmo-export")
class ElmoExport(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Export an elmo_bilm archive (LSTM contextualizer) as the standard ELMo files: "
            "options.json, weights.hdf5, vocab.txt (line i = softmax row i) and softmax.hdf5 "
            "(weight (V, P), bias (V,)). allennlp's Elmo / elmo_token_embedder read the first two."
        )
        subparser = parser.add_parser(self.name, description=description, help="Export a biLM as ELMo files.")
        subparser.add_argument("archive_file", type=str, help="model.tar.gz (or serialization folder) of an elmo_bilm")
        subparser.add_argument("output_dir", type=str, help="folder to write the files to (created if missing)")
        subparser.set_defaults(func=_export_from_args)
        return subparser


def _export_from_args(args: argparse.Namespace) -> None:
    written = export_archive(args.archive_file, args.output_dir)
    print(json.dumps(written, indent=2))


def export_archive(archive_file: str, output_dir: str) -> Dict[str, str]:
    """Writes the four files; returns {file name: path}. A transformer archive is an error
    raised before anything is written."""
    from elmo_plugin.interop import elmo_files
    from elmo_plugin.interop.load_bilm import load_bilm_model

    model = load_bilm_model(archive_file)
    encoder = model.bilm_encoder()
    elmo_files.encoder_options(encoder)  # the clear error for a transformer, before any output
    os.makedirs(output_dir, exist_ok=True)
    paths = {
        name: os.path.join(output_dir, name)
        for name in (elmo_files.OPTIONS_FILE, elmo_files.WEIGHTS_FILE, elmo_files.VOCAB_FILE, elmo_files.SOFTMAX_FILE)
    }
    rows = elmo_files.export_softmax(model, paths[elmo_files.SOFTMAX_FILE], paths[elmo_files.VOCAB_FILE])
    elmo_files.write_bilm_encoder(
        encoder,
        paths[elmo_files.OPTIONS_FILE],
        paths[elmo_files.WEIGHTS_FILE],
        extra_options={"bidirectional": True, "n_tokens_vocab": rows},
    )
    logger.info("exported %s to %s (%d softmax rows)", archive_file, output_dir, rows)
    return paths
