"""Subcommand `allennlp elmo-embed`: ELMo vectors of every line of a text file, into HDF5."""
import argparse
import json
import logging
import os
from typing import Callable, Dict, Iterator, List, Tuple

import h5py
import numpy
import torch
from allennlp.commands.subcommand import Subcommand
from allennlp.common import Tqdm
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_corpus_reader import CorpusStats, decode_line
from elmo_plugin.data.elmo_manylangs_indexer import sentence_ids
from elmo_plugin.data.elmo_vocab_file import BOS, EOS
from elmo_plugin.archives.bilm_archive import load_bilm_encoder
from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.output_paths import check_output_file
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.bilm_sentence_layers import sentence_layers

logger = logging.getLogger(__name__)

LAYER_CHOICES = ("all", "average", "top")
BATCHES_PER_CHUNK = 16  # sentences sorted by length within chunks of this many batches
PARTIAL_SUFFIX = ".partial"  # OUTPUT is written as OUTPUT.partial and renamed when complete
LINES_DONE = "elmo_embed_lines_done"  # attribute of the partial file: input lines 0..n-1 are in it
# tokens -> the id rows of `<S> tokens </S>` for the biLM
SentenceIds = Callable[[List[str]], List[List[int]]]


@Subcommand.register("elmo-embed")
class ElmoEmbed(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "ELMo vectors for every line of INPUT (whitespace tokens) into the HDF5 file OUTPUT: "
            'dataset "i" = line i (0-based), shape (layers, tokens, dim) with --layers all, '
            "(tokens, dim) otherwise; layer 0 is the character CNN output repeated to full width; "
            "<S>/</S> removed. Dataset `sentence_to_index`: a JSON string mapping each line's text "
            "to all its line numbers."
        )
        subparser = parser.add_parser(self.name, description=description, help="Embed a text file with ELMo.")
        subparser.add_argument("model", help="our biLM archive (model.tar.gz / serialization dir), allennlp-models' "
                               "bidirectional language_model archive, a folder with options.json + weights.hdf5, "
                               "or an ELMoForManyLangs model folder")
        subparser.add_argument("input_file", help="text, one whitespace-tokenized sentence per line")
        subparser.add_argument("output_file", help="HDF5 file to write")
        subparser.add_argument("--layers", choices=LAYER_CHOICES, default="all",
                               help="every layer, their average, or the top layer")
        subparser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
        subparser.add_argument("--cuda-device", type=int, default=-1, help="GPU id, -1 for CPU")
        subparser.add_argument("--resume", action="store_true",
                               help=f"continue an interrupted run from OUTPUT{PARTIAL_SUFFIX} (same input, "
                               "--layers and --batch-size); the result equals an uninterrupted run's")
        subparser.set_defaults(func=embed_from_args)
        return subparser


@reports_errors("elmo-embed")
def embed_from_args(args: argparse.Namespace) -> None:
    if not os.path.exists(args.model):
        raise ConfigurationError(f"elmo-embed: model not found: {args.model}")
    check_arguments(args.input_file, args.output_file, args.layers, args.batch_size)  # before the model loads
    encoder = load_bilm_encoder(args.model, args.cuda_device)
    embed_file(encoder, args.input_file, args.output_file, args.layers, args.batch_size, args.resume)


def check_arguments(input_file: str, output_file: str, layers: str, batch_size: int) -> None:
    if layers not in LAYER_CHOICES:
        raise ConfigurationError(f"elmo-embed: --layers must be one of {LAYER_CHOICES}, got {layers!r}")
    if batch_size < 1:
        raise ConfigurationError("elmo-embed: --batch-size must be at least 1")
    if not os.path.isfile(input_file):
        raise ConfigurationError(f"elmo-embed: input file not found: {input_file}")
    check_output_file(output_file)


def count_lines(path: str) -> int:
    """Lines in the file (a last line without a newline counts), read in 1 MiB blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as text:
        for block in iter(lambda: text.read(1 << 20), b""):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def numbered_lines(path: str, stats: CorpusStats) -> Iterator[Tuple[int, str]]:
    """(0-based line number, stripped text) of every line, blank ones included."""
    with open(path, "rb") as text:
        for index, raw in enumerate(text):
            yield index, decode_line(raw, path, index + 1, stats).strip()


def select_layers(vectors: torch.Tensor, layers: str) -> torch.Tensor:
    """(num_layers, tokens, dim) -> itself (`all`), the mean or the top layer (tokens, dim)."""
    if layers == "average":
        return vectors.mean(dim=0)
    if layers == "top":
        return vectors[-1]
    return vectors


class _Writer:
    """Writes one dataset per line into the partial file, records how many input lines are
    complete, and remembers every sentence's line numbers."""

    def __init__(self, output: h5py.File, empty_shape: Tuple[int, ...]) -> None:
        self.output, self.empty_shape = output, empty_shape
        self.sentence_to_index: Dict[str, List[int]] = {}

    def note(self, index: int, text: str) -> None:
        self.sentence_to_index.setdefault(text, []).append(index)

    def write(self, index: int, vectors: numpy.ndarray) -> None:
        self.output.create_dataset(str(index), data=vectors.astype(numpy.float32))

    def write_empty(self, index: int) -> None:
        self.write(index, numpy.zeros(self.empty_shape, dtype=numpy.float32))

    def record(self, lines_done: int) -> None:
        """Lines 0..lines_done-1 are written: flushed to disk first, then recorded as done."""
        self.output.flush()
        self.output.attrs[LINES_DONE] = lines_done
        self.output.flush()
        logger.info("elmo-embed: %d lines done (in %s)", lines_done, self.output.filename)

    def close(self) -> None:
        """sentence_to_index, and the file no longer says how to resume it."""
        dataset = self.output.create_dataset("sentence_to_index", (1,), dtype=h5py.special_dtype(vlen=str))
        dataset[0] = json.dumps(self.sentence_to_index)
        for key in list(self.output.attrs):
            del self.output.attrs[key]


def open_partial(partial: str, settings: Dict[str, object], resume: bool) -> Tuple[h5py.File, int]:
    """The partial output and how many input lines it already holds: with `resume`, the file an
    interrupted run left (made with the same `settings`), without what it wrote after its last
    record; otherwise a new file."""
    if not resume or not os.path.isfile(partial):
        if resume:
            logger.warning("elmo-embed --resume: no %s to resume; starting from the first line", partial)
        output = h5py.File(partial, "w")
        output.attrs.update({**settings, LINES_DONE: 0})
        return output, 0
    try:
        output = h5py.File(partial, "a")
    except OSError as error:
        raise ConfigurationError(f"elmo-embed --resume: cannot reopen {partial} ({error}); delete it to start over") from None
    recorded = {key: output.attrs.get(key) for key in settings}
    if recorded != settings or LINES_DONE not in output.attrs:
        output.close()
        raise ConfigurationError(
            f"elmo-embed --resume: {partial} was written with {recorded}, not {settings}; "
            "rerun with those options, or without --resume to start over"
        )
    done = int(output.attrs[LINES_DONE])
    for name in list(output):
        if not name.isdigit() or int(name) >= done:  # written after the last record
            del output[name]
    return output, done


def encoder_sentence_ids(encoder: BiLmEncoder) -> SentenceIds:
    """How the encoder's sentences become ids: an ELMoForManyLangs token embedder's own
    dictionaries, otherwise ELMo's character ids of `<S> tokens </S>` (50 per token)."""
    dictionaries = getattr(encoder.char_cnn, "dictionaries", None)
    if dictionaries is not None:
        return sentence_ids(*dictionaries, encoder.char_cnn.architecture["max_characters_per_token"])
    indexer = ElmoCharIdsIndexer()
    return lambda tokens: [indexer.char_ids(token) for token in [BOS, *tokens, EOS]]


def embed_chunk(
    encoder: BiLmEncoder,
    index_sentence: SentenceIds,
    chunk: List[Tuple[int, List[str]]],
    batch_size: int,
    layers: str,
    writer: _Writer,
) -> None:
    """(line number, tokens) pairs -> batches of similar length -> one dataset per line."""
    device = next(encoder.parameters()).device
    chunk.sort(key=lambda item: len(item[1]))
    for start in range(0, len(chunk), batch_size):
        batch = chunk[start : start + batch_size]
        rows = [index_sentence(tokens) for _, tokens in batch]
        char_ids = torch.zeros(len(batch), max(map(len, rows)), len(rows[0][0]), dtype=torch.long)
        for row, ids in enumerate(rows):
            char_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        with torch.no_grad():
            vectors, lengths = sentence_layers(encoder, char_ids.to(device))
        for (index, _), sentence, length in zip(batch, vectors.cpu(), lengths.tolist()):
            writer.write(index, select_layers(sentence[:, :length], layers).numpy())


def embed_file(
    encoder: BiLmEncoder,
    input_file: str,
    output_file: str,
    layers: str = "all",
    batch_size: int = 64,
    resume: bool = False,
) -> None:
    """Streams INPUT in chunks of `BATCHES_PER_CHUNK` batches, sorts each chunk by length, embeds
    each sentence as `<S> w1 .. wn </S>` from zero state and writes its vectors, boundaries removed,
    into OUTPUT.partial, recording after each chunk how many lines are done; renames it to OUTPUT
    when complete. `resume` continues from the last record (chunks start at the same lines as in
    an uninterrupted run, so the batches and the vectors are the same)."""
    check_arguments(input_file, output_file, layers, batch_size)
    encoder.eval()
    index_sentence = encoder_sentence_ids(encoder)
    empty_shape = (encoder.num_layers, 0, encoder.get_output_dim()) if layers == "all" else (0, encoder.get_output_dim())
    settings = {"elmo_embed_layers": layers, "elmo_embed_batch_size": batch_size,
                "elmo_embed_input_bytes": os.path.getsize(input_file)}
    partial = output_file + PARTIAL_SUFFIX
    stats = CorpusStats(files=1)
    output, done = open_partial(partial, settings, resume)
    with output:
        writer = _Writer(output, empty_shape)
        chunk: List[Tuple[int, List[str]]] = []
        progress = Tqdm.tqdm(total=count_lines(input_file), desc="elmo-embed", unit=" lines")
        for index, text in numbered_lines(input_file, stats):
            writer.note(index, text)
            tokens = text.split()
            stats.lines += bool(tokens)
            stats.blank_lines += not tokens
            progress.update(1)
            if index < done:
                continue
            if tokens:
                chunk.append((index, tokens))
            else:
                writer.write_empty(index)
            if len(chunk) >= batch_size * BATCHES_PER_CHUNK:
                embed_chunk(encoder, index_sentence, chunk, batch_size, layers, writer)
                chunk = []
                writer.record(index + 1)
        if chunk:
            embed_chunk(encoder, index_sentence, chunk, batch_size, layers, writer)
        progress.close()
        writer.close()
    os.replace(partial, output_file)
    logger.info("elmo-embed: %s", stats.summary(input_file))
    print(f"elmo-embed: {stats.lines} sentences, {stats.blank_lines} blank lines -> {output_file}")
