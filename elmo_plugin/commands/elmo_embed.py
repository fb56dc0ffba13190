"""Subcommand `allennlp elmo-embed`: ELMo vectors of every line of a text file, into HDF5."""

import argparse
import contextlib
import functools
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple, Optional, cast

import h5py
import numpy
import torch
from allennlp.commands.subcommand import Subcommand
from allennlp.common import Tqdm
from allennlp.common.checks import ConfigurationError, check_for_gpu

from elmo_plugin.archives.bilm_source import load_bilm_encoder
from elmo_plugin.commands.bucketed_batches import bucket_ids, bucketed_batches, id_table
from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.embed_input import (
    STDIN,
    Shard,
    check_input,
    count_tokens,
    is_stream,
    numbered_lines,
    parse_shard,
)
from elmo_plugin.commands.learned_mix import LearnedMix, mix_archive, read_learned_mix
from elmo_plugin.commands.line_vectors import VectorForm, line_vectors
from elmo_plugin.commands.output_paths import check_not_an_input, check_output_file
from elmo_plugin.commands.writer_thread import WriterThread
from elmo_plugin.data.corpus_stats import CorpusStats
from elmo_plugin.data.full_disk import DiskFull, check_room
from elmo_plugin.data.output_file import (
    LOCK_SUFFIX,
    OutputRefused,
    exclusive_hdf5,
    hdf5_identity,
    lock_holder,
    output_lock,
    plain_own_file,
    reopened_hdf5,
    replace_whole,
)
from elmo_plugin.elmo_files.source import local_path
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.device_paths import takes_cpu_path
from elmo_plugin.modules.sentence_pooling import POOL_CHOICES, check_pool, pool_tokens
from elmo_plugin.modules.token_vector_cache import TokenVectorCache
from elmo_plugin.training.process_settings import ProcessSettings

logger = logging.getLogger(__name__)

LAYER_CHOICES = ("all", "average", "top")  # or mix:ARCHIVE
DTYPE_CHOICES = ("float32", "float16")
PRECISION_CHOICES = ("fp32", "tf32", "bf16")
COMPRESSION_CHOICES = ("none", "gzip", "lzf")  # h5py's own filters
DEFAULT_BATCH_TOKENS = 4096  # padded tokens (<S>, </S> included) per batch
DEFAULT_SORT_WINDOW = 8192  # sentences sorted by length together
DEFAULT_TOKEN_CACHE = 50_000  # character-encoder outputs kept by token text within a window
PARTIAL_SUFFIX = ".partial"  # OUTPUT is written as OUTPUT.partial and renamed when complete
LINES_DONE = "elmo_embed_lines_done"  # attribute of the partial file: input lines 0..n-1 are in it
LINES_SHA256 = "elmo_embed_lines_sha256"  # attribute of the partial file: the text of those lines
# the names `--resume`'s refusal gives the recorded settings that are not options
SETTING_NAMES = {
    "elmo_embed_model_sha256": "the model (SHA-256 of its weights)",
    "elmo_embed_mix": "the learned mix of --layers mix:ARCHIVE",
    "elmo_embed_input_bytes": "an input of another size (bytes)",
    "elmo_embed_input_mtime_ns": "an input modified at another time (ns)",
}
DATASET_BYTES = 2048  # HDF5's records of one dataset (its header, its link), at most


@Subcommand.register("elmo-embed")
class ElmoEmbed(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "ELMo vectors for every line of INPUT (whitespace tokens) into the HDF5 file OUTPUT: "
            'dataset "i" = line i (0-based), shape (layers, tokens, dim) with --layers all, '
            "(tokens, dim) otherwise, the tokens axis pooled away with --pool mean|max; layer 0 "
            "is the character CNN output repeated to full width; <S>/</S> removed. Dataset "
            "`sentence_to_index`: a JSON string mapping each line's text to all its line numbers."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Embed a text file with ELMo."
        )
        subparser.add_argument(
            "model",
            help="our biLM archive (model.tar.gz / serialization dir), allennlp-models' "
            "bidirectional language_model archive, a folder with one *options.json + one "
            "*weights.hdf5 (any names), or an ELMoForManyLangs model folder; a URL of an archive "
            "is downloaded to allennlp's cache",
        )
        subparser.add_argument(
            "input_file",
            help="text, one whitespace-tokenized sentence per line (.gz, .bz2, .xz read "
            "directly; - for standard input; a FIFO or <(...) is read once, as standard input)",
        )
        subparser.add_argument("output_file", help="HDF5 file to write")
        subparser.add_argument(
            "--layers",
            default="all",
            help="all (every layer), average, top (the top layer), or mix:ARCHIVE (the layer "
            "mix gamma * softmax(s) that the downstream model in ARCHIVE learned)",
        )
        subparser.add_argument(
            "--pool",
            choices=POOL_CHOICES,
            default="none",
            help="one vector per line: the mean or max over its tokens, after --layers "
            "(an empty line: zeros); none: one vector per token",
        )
        subparser.add_argument(
            "--dtype", choices=DTYPE_CHOICES, default="float32", help="stored number type"
        )
        subparser.add_argument(
            "--compression",
            choices=COMPRESSION_CHOICES,
            default="none",
            help="HDF5 compression filter of every dataset",
        )
        subparser.add_argument(
            "--shard",
            default="0/1",
            help="I/N: embed only the blocks of --sort-window lines whose 0-based number modulo N "
            "is I (keys stay global line numbers; N processes with I = 0..N-1 cover the input "
            "once, with the unsharded run's vectors bit for bit)",
        )
        subparser.add_argument(
            "--batch-size", type=int, default=256, help="at most this many sentences per batch"
        )
        subparser.add_argument(
            "--batch-tokens",
            type=int,
            default=DEFAULT_BATCH_TOKENS,
            help="at most this many tokens per batch, padding and <S>/</S> included "
            "(a longer sentence is a batch of its own)",
        )
        subparser.add_argument(
            "--sort-window",
            type=int,
            default=DEFAULT_SORT_WINDOW,
            help="sentences read and sorted by length together before batching (more: less "
            "padding; memory grows with it); output order does not change",
        )
        subparser.add_argument(
            "--token-cache",
            type=int,
            default=DEFAULT_TOKEN_CACHE,
            help="character-encoder outputs kept across the batches of a window, by token text "
            "(0: none)",
        )
        subparser.add_argument("--cuda-device", type=int, default=-1, help="GPU id, -1 for CPU")
        subparser.add_argument(
            "--keep-freed-heap",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="keep freed CPU memory in the process (glibc's heap thresholds; not where "
            "glibc's own MALLOC_* variables or GLIBC_TUNABLES are set)",
        )
        subparser.add_argument(
            "--tf32",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="let (or stop) float32 matmuls and convolutions on the GPU use TF32; "
            "default: torch's (--precision tf32 lets them)",
        )
        subparser.add_argument(
            "--precision",
            choices=PRECISION_CHOICES,
            default="fp32",
            help="fp32: float32 weights and activations; tf32: the same with TF32 matmuls and "
            "convolutions on a GPU (as --tf32; on a CPU the same as fp32); bf16: the encoder "
            "under bfloat16 autocast (memory cells in float32). The stored type is --dtype's",
        )
        subparser.add_argument(
            "--resume",
            action="store_true",
            help=f"continue an interrupted run from OUTPUT{PARTIAL_SUFFIX} (same model weights, "
            "the same input file, unchanged, and the same --layers, --pool, --dtype, "
            "--compression, --shard, --batch-size, --batch-tokens, --sort-window and --precision, "
            "or refused naming what differs); the result equals an uninterrupted run's; not with "
            "standard input or a FIFO",
        )
        subparser.set_defaults(func=embed_from_args)
        return subparser


@reports_errors("elmo-embed")
def embed_from_args(args: argparse.Namespace) -> None:
    model = local_path(args.model, "elmo-embed: model")
    batching = Batching(args.batch_size, args.batch_tokens, args.sort_window, args.token_cache)
    output = OutputFormat(args.pool, args.dtype, args.compression)
    shard = parse_shard(args.shard, args.sort_window)
    # before the model loads
    check_cuda_device(args.cuda_device)
    check_arguments(
        args.input_file, args.output_file, args.layers, batching, args.resume, output, model
    )
    if args.precision == "tf32" and args.tf32 is False:
        raise ConfigurationError("elmo-embed: --precision tf32 uses TF32; it cannot be --no-tf32")
    mix = read_learned_mix(mix_archive(args.layers)) if mix_archive(args.layers) else None
    tf32 = True if args.precision == "tf32" else args.tf32
    ProcessSettings(keep_freed_heap=args.keep_freed_heap, tf32=tf32).apply()
    encoder = load_bilm_encoder(model, args.cuda_device)
    if mix is not None:
        mix.check_fits(encoder, model)
    embed_file(
        encoder,
        args.input_file,
        args.output_file,
        args.layers,
        batching,
        args.resume,
        output,
        shard,
        mix,
        args.precision,
    )


class Batching(NamedTuple):
    """How `elmo-embed` groups sentences: at most `batch_size` sentences and `batch_tokens` padded
    tokens per batch, sentences sorted by length within windows of `sort_window`, and up to
    `token_cache` character-encoder outputs reused across batches."""

    batch_size: int = 256
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    sort_window: int = DEFAULT_SORT_WINDOW
    token_cache: int = DEFAULT_TOKEN_CACHE


class OutputFormat(NamedTuple):
    """What `elmo-embed` stores per line: `pool` (none, mean, max) over the tokens, as `dtype`
    (float32, float16), each dataset compressed with `compression` (none, gzip, lzf)."""

    pool: str = "none"
    dtype: str = "float32"
    compression: str = "none"


DEFAULT_BATCHING, DEFAULT_FORMAT, WHOLE_INPUT = Batching(), OutputFormat(), Shard()


def check_arguments(
    input_file: str,
    output_file: str,
    layers: str,
    batching: Batching,
    resume: bool = False,
    output: OutputFormat = DEFAULT_FORMAT,
    model: str = "",
) -> None:
    """Before any work: the options, the input (`check_input`), the output's folder, and that the
    output is none of the inputs (`model`, INPUT, the mix archive)."""
    if layers not in LAYER_CHOICES and not mix_archive(layers):
        raise ConfigurationError(
            f"elmo-embed: --layers must be one of {LAYER_CHOICES} or mix:ARCHIVE, got {layers!r}"
        )
    check_pool(output.pool, "elmo-embed --pool")
    for name, value, choices in (
        ("dtype", output.dtype, DTYPE_CHOICES),
        ("compression", output.compression, COMPRESSION_CHOICES),
    ):
        if value not in choices:
            raise ConfigurationError(
                f"elmo-embed: --{name} must be one of {choices}, got {value!r}"
            )
    for name, least in (
        ("batch_size", 1),
        ("batch_tokens", 1),
        ("sort_window", 1),
        ("token_cache", 0),
    ):
        if getattr(batching, name) < least:
            raise ConfigurationError(
                f"elmo-embed: --{name.replace('_', '-')} must be at least {least}, "
                f"got {getattr(batching, name)}"
            )
    if resume and is_stream(input_file):
        shown = "standard input (-)" if input_file == STDIN else f"the stream {input_file}"
        raise ConfigurationError(
            f"elmo-embed: --resume needs an input file, not {shown}, which cannot be "
            "read again to find where the interrupted run stopped"
        )
    check_input(input_file)
    check_output_file(output_file)
    inputs = {model: "model", input_file: "input file", mix_archive(layers): "mix archive"}
    inputs.pop(STDIN, None)
    inputs.pop("", None)
    check_not_an_input([output_file], inputs)


def check_cuda_device(cuda_device: int) -> None:
    """`--cuda-device` names a GPU that torch sees here, or is -1 (the CPU)."""
    try:
        check_for_gpu(cuda_device)
    except ConfigurationError:
        raise ConfigurationError(
            f"elmo-embed: --cuda-device {cuda_device}: torch sees {torch.cuda.device_count()} "
            "GPUs on this machine; --cuda-device -1 runs on the CPU"
        ) from None


class _Writer:
    """Writes one dataset per line into the partial file (its vectors as `line_vectors` made
    them, compressed as `form` says), records how many input lines are complete, and remembers
    every sentence's line numbers. Room on the disk is checked before each write
    (`check_room`): a DiskFull naming `name` (OUTPUT) leaves the file whole. `embed_file` runs
    its writes and records on a `WriterThread`, `note` and `close` in its own thread."""

    def __init__(
        self,
        output: h5py.File,
        path: str,
        empty_shape: tuple[int, ...],
        form: OutputFormat,
        name: str,
    ) -> None:
        self.output, self.path, self.name = output, path, name
        self.empty_shape, self.form = empty_shape, form
        self.sentence_to_index: dict[str, list[int]] = {}
        self.lines_sha256 = hashlib.sha256()  # of the lines noted so far, recorded with them
        self.expected: Optional[ResumePoint] = None  # with --resume: to compare, once read again
        self.overflows = 0  # lines with values beyond float16's range
        # bytes of one token's (or a pooled line's) values
        self.row_bytes = (
            math.prod(empty_shape[:-2]) * empty_shape[-1] * numpy.dtype(form.dtype).itemsize
        )

    def check_room_for(self, chunk: list[tuple[int, list[str]]]) -> None:
        """Room for the datasets of `chunk`'s lines (uncompressed, HDF5's records included)."""
        rows = [1 if self.form.pool != "none" else len(tokens) for _, tokens in chunk]
        needed = sum(rows) * self.row_bytes + DATASET_BYTES * len(chunk)
        check_room(self.path, needed, self.name)

    def note(self, index: int, text: str) -> None:
        if self.expected is not None and index >= self.expected.lines_done:
            self.check_resumed_lines()
        self.lines_sha256.update(text.encode() + b"\n")
        self.sentence_to_index.setdefault(text, []).append(index)

    def check_resumed_lines(self) -> None:
        """With --resume, once the lines recorded as done have been read again (before anything
        is written): they are the lines the interrupted run embedded."""
        if self.expected is not None and self.lines_sha256.hexdigest() != self.expected.sha256:
            raise ConfigurationError(
                f"elmo-embed --resume: the first {self.expected.lines_done} lines of "
                f"{self.expected.input_file} are not those {self.path} holds (the input "
                "changed since); rerun without --resume to start over"
            )
        self.expected = None

    def write(self, index: int, data: numpy.ndarray, num_tokens: int) -> None:
        """data: one line's vectors as stored, (..., tokens, dim), or (..., dim) pooled."""
        if self.form.dtype == "float16" and not numpy.isfinite(data).all():
            self.overflows += 1
        compression = (
            self.form.compression if data.size and self.form.compression != "none" else None
        )
        dataset = self.output.create_dataset(str(index), data=data, compression=compression)
        if self.form.pool != "none":
            dataset.attrs["num_tokens"] = num_tokens

    def write_batch(
        self,
        batch: list[tuple[int, list[str]]],
        vectors: torch.Tensor,
        ready: Optional[torch.cuda.Event],
    ) -> None:
        """A batch's `line_vectors` (rows, ...) on the host, once `ready` (the event its copy
        from the GPU is done by; None: done) -> one dataset per line, padding cut."""
        if ready is not None:
            ready.synchronize()
        pooled = self.form.pool != "none"
        for row, (index, tokens) in enumerate(batch):
            data = vectors[row] if pooled else vectors[row, ..., : len(tokens), :]
            self.write(index, numpy.ascontiguousarray(data.numpy()), len(tokens))

    def write_empty(self, index: int) -> None:
        check_room(self.path, DATASET_BYTES, self.name)
        empty = pool_tokens(torch.zeros(self.empty_shape), self.form.pool)
        self.write(index, empty.numpy().astype(self.form.dtype), 0)

    def record(self, lines_done: int, lines_sha256: str) -> None:
        """Lines 0..lines_done-1 (their text's digest `lines_sha256`) are written: flushed to
        disk first, then recorded as done."""
        self.output.flush()
        self.output.attrs[LINES_SHA256] = lines_sha256
        self.output.attrs[LINES_DONE] = lines_done
        self.output.flush()
        logger.info("elmo-embed: %d lines done (in %s)", lines_done, self.path)

    def close(self) -> None:
        """sentence_to_index, and the file no longer says how to resume it."""
        self.check_resumed_lines()
        if self.overflows:
            logger.warning(
                "elmo-embed: %d lines have values beyond float16's range (stored as inf); "
                "use --dtype float32",
                self.overflows,
            )
        text = json.dumps(self.sentence_to_index)
        check_room(self.path, len(text.encode()) + DATASET_BYTES, self.name)
        dataset = self.output.create_dataset(
            "sentence_to_index", (1,), dtype=h5py.special_dtype(vlen=str)
        )
        dataset[0] = text
        for key in list(self.output.attrs):
            del self.output.attrs[key]


class ResumePoint(NamedTuple):
    """Where an interrupted run stopped: input lines 0..lines_done-1 are in the partial file;
    `sha256` is the digest of their text, which the resumed run compares once it has read them
    again from `input_file`."""

    lines_done: int
    sha256: str
    input_file: str


def open_partial(
    partial: str, settings: dict[str, object], resume: bool, input_file: str, shown: str = ""
) -> tuple[h5py.File, Optional[ResumePoint]]:
    """The partial output and where it stopped: with `resume`, the file an interrupted run left
    (made with the same `settings`, else an error naming the first that differs), without what
    it wrote after its last record; otherwise a new file (and None), created exclusively once an
    interrupted run's is removed (`remove_interrupted`). Either is locked until closed."""
    shown = shown or partial
    if not resume or not os.path.lexists(partial):
        if resume:
            logger.warning(
                "elmo-embed --resume: no %s to resume; starting from the first line", partial
            )
        remove_interrupted(partial, shown)
        output = exclusive_hdf5(partial, shown)
        output.attrs.update({**settings, LINES_DONE: 0})
        return output, None
    try:
        output = reopened_hdf5(partial, shown)
    except OSError as error:
        raise ConfigurationError(
            f"elmo-embed --resume: cannot reopen {partial} ({error}); delete it to start over"
        ) from None
    differing = [key for key, value in settings.items() if output.attrs.get(key) != value]
    if differing or LINES_DONE not in output.attrs:
        key = differing[0] if differing else LINES_DONE
        recorded, value = output.attrs.get(key, "nothing"), settings.get(key, "a record")
        recorded = recorded.item() if isinstance(recorded, numpy.generic) else recorded
        output.close()
        name = SETTING_NAMES.get(key, "--" + key.removeprefix("elmo_embed_").replace("_", "-"))
        raise ConfigurationError(
            f"elmo-embed --resume: {partial} was written with {name} {recorded!r}, this run has "
            f"{value!r}; rerun with the interrupted run's, or without --resume to start over"
        )
    done = int(output.attrs[LINES_DONE])
    for name in list(output):
        if not name.isdigit() or int(name) >= done:  # written after the last record
            del output[name]
    return output, ResumePoint(done, str(output.attrs.get(LINES_SHA256, "")), input_file)


def remove_interrupted(partial: str, shown: str) -> None:
    """Removes the partial file an interrupted run left at `partial` (an HDF5 file of this user
    that records lines done, held by no process); refuses anything else there, leaving it."""
    if not os.path.lexists(partial):
        return
    plain_own_file(partial, shown)
    holder = lock_holder(partial)
    try:
        with h5py.File(partial, "r") as interrupted:
            resumable = LINES_DONE in interrupted.attrs
    except OSError:
        resumable = False
    if holder is not None or not resumable:
        raise OutputRefused(
            f"cannot write {shown}: {partial} is not the partial file of an interrupted "
            f"elmo-embed run{f' (held by {holder})' if holder else ''}; it was left as it is: "
            "remove it or write to another path"
        )
    os.remove(partial)


@contextlib.contextmanager
def resumable_when_full(partial: str, input_file: str) -> Iterator[None]:
    """A DiskFull while writing `partial` (raised before HDF5 writes, so the file stays whole)
    says how to go on: `--resume` continues from the lines recorded as done; the partial file
    of a stream, which cannot be resumed, is removed."""
    try:
        yield
    except DiskFull as error:
        if is_stream(input_file):
            os.remove(partial)
            raise
        raise DiskFull(
            f"{error}; {partial} keeps the lines recorded as done, for --resume once there is room"
        ) from None


class TokenIds(NamedTuple):
    """How the encoder's tokens become ids: `ids` maps one token text to its id row; sentences
    are framed by the texts `bos` and `eos`."""

    ids: Callable[[str], list[int]]
    bos: str
    eos: str


def encoder_token_ids(encoder: BiLmEncoder) -> TokenIds:
    """The character encoder's own token ids and sentence boundary tokens."""
    characters = encoder.characters
    return TokenIds(characters.token_ids, *characters.boundary_tokens)


def length_sorted_batches(
    chunk: list[tuple[int, list[str]]], batching: Batching
) -> Iterator[list[tuple[int, list[str]]]]:
    """(line number, tokens) pairs -> batches of similar length, shortest first, each within
    `batching.batch_size` sentences and `batching.batch_tokens` padded tokens (<S>, </S>
    included)."""
    chunk = sorted(chunk, key=lambda item: len(item[1]))
    batch: list[tuple[int, list[str]]] = []
    for item in chunk:
        padded = (len(batch) + 1) * (len(item[1]) + 2)  # sorted: the new sentence is the longest
        if batch and (len(batch) == batching.batch_size or padded > batching.batch_tokens):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def encoder_precision(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Where the encoder runs: bfloat16 autocast on its device for `precision` bf16 (fp32 and
    tf32 need none: TF32 is a process setting)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def embed_batch(
    encoder: BiLmEncoder,
    cache: TokenVectorCache,
    batch: list[tuple[int, list[str]]],
    token_ids: TokenIds,
    form: VectorForm,
    precision: str = "fp32",
) -> torch.Tensor:
    """The CPU's path: sentences -> their `line_vectors` (batch, ...), with the character
    encoder's outputs from `cache`."""
    sentences = [[token_ids.bos, *tokens, token_ids.eos] for _, tokens in batch]
    width = max(len(sentence) for sentence in sentences)
    lengths = torch.tensor([len(sentence) for sentence in sentences])
    device = next(encoder.parameters()).device
    with encoder_precision(precision, device):
        vectors = cache.vectors([text for sentence in sentences for text in sentence])
        mask = cast(torch.BoolTensor, (torch.arange(width) < lengths.unsqueeze(1)).to(device))
        tokens = vectors.new_zeros(len(batch), width, vectors.size(-1))
        tokens[mask] = vectors  # row-major: sentence by sentence, in order
        layers = encoder.layers_from_tokens(tokens, mask)
    return line_vectors(layers, mask, form)


def embed_bucket(
    encoder: BiLmEncoder, ids: torch.Tensor, form: VectorForm, precision: str = "fp32"
) -> torch.Tensor:
    """The fixed-shape path (every device but the CPU): a bucket's token ids (rows, width, ids
    per token) on the host -> its `line_vectors` (rows, ...) on the encoder's device. The ids
    are copied without waiting (from pinned memory on CUDA); the encoder runs its own device
    path over every token (on CUDA the character CNN's `reference`, the LSTM's whole-sequence
    function): the same ops on the same shapes for every batch of a bucket, no host reads."""
    device = next(encoder.parameters()).device
    if device.type == "cuda":
        ids = ids.pin_memory()
    with encoder_precision(precision, device):
        layers, mask = encoder(ids.to(device, non_blocking=True))
    return line_vectors(layers, mask, form)


def to_host(vectors: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.cuda.Event]]:
    """Vectors -> (their copy on the host, the CUDA event it is complete by): from CUDA copied
    into pinned memory without waiting; from elsewhere at once (None)."""
    if vectors.device.type != "cuda":
        return vectors.cpu(), None
    host = vectors.to("cpu", non_blocking=True)
    ready = torch.cuda.Event()
    ready.record()
    return host, ready


Batches = Iterator[tuple[list[tuple[int, list[str]]], torch.Tensor]]


def cpu_batches(
    encoder: BiLmEncoder,
    token_ids: TokenIds,
    chunk: list[tuple[int, list[str]]],
    batching: Batching,
    form: VectorForm,
    precision: str,
) -> Batches:
    """The CPU's path: length-sorted batches through `embed_batch`. The token cache lives for
    one window: a resumed run, which starts at a window, then computes every vector exactly as
    an uninterrupted one (bit for bit)."""
    cache = TokenVectorCache(encoder.char_cnn, token_ids.ids, batching.token_cache)
    for batch in length_sorted_batches(chunk, batching):
        yield batch, embed_batch(encoder, cache, batch, token_ids, form, precision)
    logger.info(
        "elmo-embed: token cache %d hits, %d misses in this window", cache.hits, cache.misses
    )


def fixed_shape_batches(
    encoder: BiLmEncoder,
    token_ids: TokenIds,
    chunk: list[tuple[int, list[str]]],
    batching: Batching,
    form: VectorForm,
    precision: str,
) -> Batches:
    """The fixed-shape path: `bucketed_batches` through `embed_bucket`, the token ids built on
    the host from one table per window."""
    boundaries = (token_ids.bos, token_ids.eos)
    ids = id_table(chunk, token_ids.ids, boundaries)
    for bucket in bucketed_batches(chunk, batching.batch_size, batching.batch_tokens):
        yield (
            bucket.batch,
            embed_bucket(encoder, bucket_ids(bucket, ids, boundaries), form, precision),
        )


def embed_chunk(
    encoder: BiLmEncoder,
    token_ids: TokenIds,
    chunk: list[tuple[int, list[str]]],
    batching: Batching,
    form: VectorForm,
    write: Callable[..., None],
    progress,
    precision: str = "fp32",
) -> None:
    """(line number, tokens) pairs -> batches (`cpu_batches` where the encoder's device runs the
    CPU's paths, else `fixed_shape_batches`) -> each batch's `write(batch, vectors on the host,
    ready)`: `_Writer.write_batch`'s arguments, the copy from a GPU not waited for."""
    device = next(encoder.parameters()).device
    path = cpu_batches if takes_cpu_path(device) else fixed_shape_batches
    with torch.no_grad():
        for batch, vectors in path(encoder, token_ids, chunk, batching, form, precision):
            write(batch, *to_host(vectors))
            progress.update(sum(len(tokens) for _, tokens in batch))


def run_settings(
    input_file: str,
    layers: str,
    mix: Optional[LearnedMix],
    batching: Batching,
    output_format: OutputFormat,
    shard: Shard,
    encoder: BiLmEncoder,
) -> dict[str, object]:
    """What a run writes into OUTPUT.partial's attributes for `--resume` to compare. All
    that changes which vectors go where: the model by its weights (`model_sha256`), the options,
    the input by its size in bytes and modification time (-1 for a stream; the text of the lines
    done is recorded and compared too, `_Writer.check_resumed_lines`)."""
    stream = is_stream(input_file)
    return {
        "elmo_embed_model_sha256": model_sha256(encoder),
        "elmo_embed_layers": layers,
        "elmo_embed_mix": mix.settings() if mix is not None else "",
        "elmo_embed_pool": output_format.pool,
        "elmo_embed_dtype": output_format.dtype,
        "elmo_embed_compression": output_format.compression,
        "elmo_embed_shard": str(shard),
        "elmo_embed_batch_size": batching.batch_size,
        "elmo_embed_batch_tokens": batching.batch_tokens,
        "elmo_embed_sort_window": batching.sort_window,
        "elmo_embed_token_cache": batching.token_cache,
        "elmo_embed_input_bytes": -1 if stream else os.path.getsize(input_file),
        "elmo_embed_input_mtime_ns": -1 if stream else os.stat(input_file).st_mtime_ns,
    }


def model_sha256(encoder: BiLmEncoder) -> str:
    """SHA-256 of the encoder's weights (each tensor of its state_dict: name, type, shape and
    bytes): the vectors depend on nothing else of the model."""
    digest = hashlib.sha256()
    for name, tensor in encoder.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def embed_file(
    encoder: BiLmEncoder,
    input_file: str,
    output_file: str,
    layers: str = "all",
    batching: Batching = DEFAULT_BATCHING,
    resume: bool = False,
    output_format: OutputFormat = DEFAULT_FORMAT,
    shard: Shard = WHOLE_INPUT,
    mix: Optional[LearnedMix] = None,
    precision: str = "fp32",
) -> None:
    """Streams INPUT in windows of `batching.sort_window` sentences, sorts each window by
    length, embeds it in batches of at most `batching.batch_tokens` padded tokens (each sentence
    as `<S> w1 .. wn </S>` from zero state). It writes each line's vectors, boundaries removed,
    into OUTPUT.partial as dataset "line number", recording after each window how many lines are
    done. It renames it to OUTPUT when complete (`replace_whole`); OUTPUT.lock is held meanwhile
    (`output_lock`); a link at OUTPUT is replaced, its target never written. The order of
    computation changes nothing in the output. `resume` continues from the last record (windows
    start at the same lines as in an uninterrupted run, so the batches and the vectors are the
    same). `output_format` pools, casts and compresses each line's dataset; `shard` embeds only
    its lines (keys stay global line numbers); `layers` = `mix:ARCHIVE` applies `mix` (read from
    ARCHIVE when not given). `precision` is fp32, tf32 (the same here: TF32 is a process
    setting) or bf16 (`encoder_precision`). INPUT `-` is standard input; it and other streams
    (`is_stream`) have no progress total and no `resume`.

    Two paths, the same vectors within float rounding: the CPU's (`cpu_batches`:
    character-encoder outputs cached by token within the window), and the fixed-shape one
    (`fixed_shape_batches`), which every other device takes (`takes_cpu_path`). Either way the
    writes run on a `WriterThread` while the next batches are computed, and a GPU's results are
    copied back without waiting for them."""
    check_arguments(input_file, output_file, layers, batching, resume, output_format)
    if precision not in PRECISION_CHOICES:
        raise ConfigurationError(
            f"elmo-embed: --precision must be one of {PRECISION_CHOICES}, got {precision!r}"
        )
    if mix_archive(layers) and mix is None:
        mix = read_learned_mix(mix_archive(layers))
        mix.check_fits(encoder, "the biLM")
    encoder.eval()
    device = next(encoder.parameters()).device
    form = vector_form(layers, mix, output_format, device)
    token_ids = encoder_token_ids(encoder)
    empty_shape = (
        (encoder.num_layers, 0, encoder.get_output_dim())
        if layers == "all"
        else (0, encoder.get_output_dim())
    )
    with output_lock(output_file, output_file + LOCK_SUFFIX):
        settings = run_settings(input_file, layers, mix, batching, output_format, shard, encoder)
        settings["elmo_embed_precision"] = precision
        partial = output_file + PARTIAL_SUFFIX
        stats = CorpusStats(files=1)
        lines = numbered_lines(input_file, stats, shard)  # a stream: checked to be text now
        total = None if is_stream(input_file) else count_tokens(input_file, shard)
        output, resumed = open_partial(partial, settings, resume, input_file, output_file)
        done = resumed.lines_done if resumed is not None else 0
        with resumable_when_full(partial, input_file), output:
            writer = _Writer(output, partial, empty_shape, output_format, output_file)
            writer.expected = resumed
            progress = Tqdm.tqdm(total=total, desc="elmo-embed", unit=" tokens", unit_scale=True)
            with WriterThread() as background:

                def embed(chunk: list[tuple[int, list[str]]]) -> None:
                    background.submit(writer.check_room_for, chunk)
                    write = functools.partial(background.submit, writer.write_batch)
                    args = (chunk, batching, form, write, progress, precision)
                    embed_chunk(encoder, token_ids, *args)

                chunk: list[tuple[int, list[str]]] = []
                for index, text in lines:
                    writer.note(index, text)
                    tokens = text.split()
                    stats.lines += bool(tokens)
                    stats.blank_lines += not tokens
                    if index < done:
                        progress.update(len(tokens))
                        continue
                    if tokens:
                        chunk.append((index, tokens))
                    else:
                        background.submit(writer.write_empty, index)
                    if len(chunk) >= batching.sort_window:
                        embed(chunk)
                        chunk = []
                        digest = writer.lines_sha256.hexdigest()
                        background.submit(writer.record, index + 1, digest)
                if chunk:
                    embed(chunk)
            progress.close()
            writer.close()
            identity = hdf5_identity(output)
        replace_whole(partial, identity, output_file, output_file)
    stats.report(input_file, prefix="elmo-embed: ")
    if shard.parts > 1:
        logger.info(
            "elmo-embed: shard %s: the blocks of %d lines whose number modulo %d is %d",
            shard,
            shard.block,
            shard.parts,
            shard.part,
        )
    print(f"elmo-embed: {stats.lines} sentences, {stats.blank_lines} blank lines -> {output_file}")


def vector_form(
    layers: str, mix: Optional[LearnedMix], output_format: OutputFormat, device: torch.device
) -> VectorForm:
    """`--layers` (the mix's weights on `device`), `--pool` and `--dtype` as `line_vectors`
    takes them."""
    form = VectorForm(layers, output_format.pool, output_format.dtype)
    if mix is None:
        return form
    weights = torch.tensor(mix.weights, device=device)
    return form._replace(layers="mix", mix_weights=weights, mix_gamma=mix.gamma)
