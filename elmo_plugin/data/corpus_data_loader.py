"""`CorpusDataLoader`: what the `elmo_corpus` and `elmo_streams` data loaders share. Both read an
`elmo_corpus` reader's corpus in chunks (`corpus_chunks`), in an order that is a function of
(seed, epoch), and keep their position (epoch, chunk, batch) so that a resumed run
(`allennlp train -r` with the `elmo_corpus_resume` callback) continues exactly where the
checkpoint was, without reading what came before. Each loader says how an epoch's batches are
made (`epoch_batches`) and how many there are (`__len__`); both may pad every batch to one shape
(`fixed_shape`), and both copy batches to a CUDA device from pinned memory without waiting."""

import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import is_distributed
from allennlp.data import Instance, Vocabulary
from allennlp.data.data_loaders.data_collator import DataCollator, DefaultDataCollator
from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict

from elmo_plugin.data.corpus_chunks import chunk_order, corpus_chunks
from elmo_plugin.data.corpus_stats import MAX_UTF8_WARNINGS, CorpusStats, warn_invalid_utf8
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader

logger = logging.getLogger(__name__)


@dataclass
class LoaderPosition:
    """Where a loader stands: `epoch` (0-based) being read, `batches` it yielded in it, and the
    next batch to read: batch `chunk_batch` of the chunk at `chunk_ordinal` in the epoch's chunk
    order; `epoch_batches`: how many batches each finished epoch had."""

    seed: int
    epoch: int = 0
    batches: int = 0
    chunk_ordinal: int = 0
    chunk_batch: int = 0
    epoch_batches: list[int] = field(default_factory=list)


def padded(tensor: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
    """`tensor` in the first positions of a zero tensor whose leading dimensions have `sizes`
    (the others are kept)."""
    out = tensor.new_zeros((*sizes, *tensor.shape[len(sizes) :]))
    out[tuple(slice(0, size) for size in tensor.shape[: len(sizes)])] = tensor
    return out


def fixed_shape_batch(batch: TensorDict, rows: int, timesteps: int) -> TensorDict:
    """`batch` padded with zeros (no token, no target, False) to `rows` rows, and its text
    fields' tensors (those in nested dicts: (batch, timesteps, ...)) to `timesteps` positions."""

    def fixed(value: Any, sizes: tuple[int, ...]) -> Any:
        if isinstance(value, dict):
            return {key: fixed(item, (rows, timesteps)) for key, item in value.items()}
        return padded(value, sizes)

    return {name: fixed(value, (rows,)) for name, value in batch.items()}


def to_device(batch: TensorDict, device: torch.device) -> TensorDict:
    """`batch` on `device`. To a CUDA device each CPU tensor is pinned (page-locked, here in the
    main process) and copied with `non_blocking=True`, so the host does not wait for the copy;
    elsewhere `Tensor.to` as is. A tensor already on `device` is kept."""
    cuda = device.type == "cuda"

    def moved(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: moved(item) for key, item in value.items()}
        if isinstance(value, torch.Tensor):
            pinned = value.pin_memory() if cuda and value.device.type == "cpu" else value
            return pinned.to(device, non_blocking=cuda)
        return value

    return moved(batch)


class CorpusDataLoader(DataLoader, ABC):
    """
    The shared part of the corpus loaders (not registered itself): the reader and corpus chunks,
    this process's place among distributed processes, indexing, the device, and the position
    with exact resume. `resume_from` (called by the `elmo_corpus_resume` callback) starts at a
    saved position: the batches before it are yielded as empty placeholders, which allennlp's
    trainer skips. Batches go to the target device by `to_device` (pinned, non-blocking copies
    to CUDA).

    Subclasses give `epoch_batches(epoch, first_ordinal, skip)`, the epoch's (chunk ordinal,
    batch) pairs from batch `skip` of chunk ordinal `first_ordinal` on, and `__len__`. A
    subclass that reads every chunk counts each one's `CorpusStats` in the read's total
    (`tally`) and ends with `finish_read`: the first read of the corpus is summarized in one
    log line, and a corpus with no text is an error. A subclass that sets `fixed_timesteps`
    gets batches of one shape from `collate`: `batch_size` rows of that many positions.
    """

    name = "data_loader"  # how errors name the loader: "data_loader TYPE"

    def __init__(
        self,
        reader: ElmoCorpusReader,
        data_path: str,
        batch_size: int,
        shuffle: bool,
        chunk_bytes: int,
        seed: Optional[int],
        cuda_device: Optional[Union[int, str, torch.device]],
        collate_fn: Optional[DataCollator],
    ) -> None:
        if not isinstance(reader, ElmoCorpusReader):
            raise ConfigurationError(f"{self.name}: needs the elmo_corpus dataset reader")
        self.check_at_least(batch_size=(batch_size, 1), chunk_bytes=(chunk_bytes, 1))
        self.reader = reader
        self.data_path = data_path
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.collate_fn = collate_fn or DefaultDataCollator()
        self.chunks = corpus_chunks(data_path, chunk_bytes)
        self.world_size, self.rank = (
            (torch.distributed.get_world_size(), torch.distributed.get_rank())
            if is_distributed()
            else (1, 0)
        )
        self.position = LoaderPosition(seed=random.randrange(2**32) if seed is None else seed)
        self.resume_start: Optional[LoaderPosition] = None  # set by resume_from
        self.vocab: Optional[Vocabulary] = None
        self.device: Optional[torch.device] = (
            None if cuda_device is None else torch.device(cuda_device)
        )
        self.fixed_timesteps: Optional[int] = None  # positions of every batch, if fixed
        self._utf8_warnings = 0  # lines with invalid UTF-8 named so far (at most MAX_...)
        self._summarized = False  # whether a read of every chunk was summarized

    def check_at_least(self, **settings: tuple[int, int]) -> None:
        """A configuration error for the first `key=(value, least)` with value < least."""
        for key, (value, least) in settings.items():
            if value < least:
                raise ConfigurationError(
                    f"{self.name}: {key} must be at least {least}, got {value}"
                )

    # --- what a loader gives ---

    @abstractmethod
    def epoch_batches(
        self, epoch: int, first_ordinal: int, skip: int
    ) -> Iterator[tuple[int, TensorDict]]:
        """(chunk ordinal, batch) for epoch `epoch`, from batch `skip` of chunk ordinal
        `first_ordinal` on (a resumed epoch reads nothing before it)."""

    @abstractmethod
    def __len__(self) -> int:
        """This process's batches per epoch (allennlp's progress bar total, and learning-rate
        schedulers' `num_steps_per_epoch`)."""

    @property
    def length_is_estimate(self) -> bool:
        """Whether `len(self)` is an estimate rather than exact."""
        return False

    def layout(self) -> str:
        """What a position means: the same chunks, batch size and number of processes."""
        return (
            f"{len(self.chunks)} chunks of {self.data_path}, batch_size {self.batch_size}, "
            f"{self.world_size} processes"
        )

    # --- allennlp's DataLoader interface ---

    def index_with(self, vocab: Vocabulary) -> None:
        self.vocab = vocab

    def set_target_device(self, device: torch.device) -> None:
        self.device = device

    def iter_instances(self) -> Iterator[Instance]:
        """Every instance the reader makes of the corpus, in file order (for vocabularies),
        indexed once `index_with` was called."""
        read = CorpusStats()
        for chunk in self.chunks:
            stats = CorpusStats()
            for instance in self.reader.range_instances(chunk.path, chunk.start, chunk.end, stats):
                yield self.indexed(instance)
            self.tally(read, stats)
        self.finish_read(read)

    def __iter__(self) -> Iterator[TensorDict]:
        """One epoch's batches (the next epoch on every call)."""
        if self.vocab is None:
            raise ValueError(f"{self.name}: call index_with(vocab) before iterating")
        position = self.begin_epoch()
        start = self.resume_start
        if start is not None:
            replayed = position.epoch < start.epoch
            for _ in range(start.epoch_batches[position.epoch] if replayed else start.batches):
                position.batches += 1
                yield {}  # a batch the trainer skips; nothing was read for it
            if replayed:
                self.end_epoch()
                return
            position.chunk_ordinal, position.chunk_batch = start.chunk_ordinal, start.chunk_batch
            self.resume_start = None
        for ordinal, batch in self.epoch_batches(
            position.epoch, position.chunk_ordinal, position.chunk_batch
        ):
            if ordinal != position.chunk_ordinal:
                position.chunk_ordinal, position.chunk_batch = ordinal, 0
            position.chunk_batch += 1
            position.batches += 1
            yield batch if self.device is None else to_device(batch, self.device)
        self.end_epoch()

    # --- what the shared parts give a loader ---

    def chunk_order(self, epoch: int) -> list[int]:
        """Indices into `self.chunks` in the order epoch `epoch` reads them."""
        return chunk_order(len(self.chunks), self.shuffle, self.position.seed, epoch)

    def tally(self, read: CorpusStats, stats: CorpusStats) -> None:
        """Adds one chunk's `stats` to the `read` of the corpus; process 0 warns of the first
        `MAX_UTF8_WARNINGS` lines with invalid UTF-8 the loader meets."""
        places = read.add(stats)[: MAX_UTF8_WARNINGS - self._utf8_warnings]
        if self.rank == 0:
            warn_invalid_utf8(places)
        self._utf8_warnings += len(places)

    def finish_read(self, read: CorpusStats) -> None:
        """After a `read` of every chunk: an error when the corpus has no text; the summary line
        (process 0, once: each read of the same corpus counts the same)."""
        read.require_text(self.data_path)
        if self.rank == 0 and not self._summarized:
            logger.info(read.summary(self.data_path))
        self._summarized = True

    def collate(self, instances: list[Instance]) -> TensorDict:
        """The batch of `instances` (indexed here) by `collate_fn`; with `fixed_timesteps`,
        padded with zeros to `batch_size` rows of that many positions (`fixed_shape_batch`)."""
        batch = self.collate_fn([self.indexed(instance) for instance in instances])
        if self.fixed_timesteps is None:
            return batch
        return fixed_shape_batch(batch, self.batch_size, self.fixed_timesteps)

    def indexed(self, instance: Instance) -> Instance:
        """`instance` with the reader's token indexers, indexed once `index_with` was called."""
        self.reader.apply_token_indexers(instance)
        if self.vocab is not None:
            instance.index_fields(self.vocab)
        return instance

    def finished_epoch_batches(self) -> list[int]:
        """How many batches each finished epoch had (also those before a resume)."""
        return self.position.epoch_batches or (
            self.resume_start.epoch_batches if self.resume_start is not None else []
        )

    # --- positions, for exact resume ---

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch yielded and the layout it is a position in (plain
        Python values, for a checkpoint)."""
        return {**asdict(self.position), "layout": self.layout()}

    def resume_from(self, state: dict[str, Any]) -> None:
        """Continue at a `state_dict()` position, from epoch 0 on (as allennlp's trainer replays
        the finished epochs): each finished epoch yields as many placeholders as it had batches,
        the epoch of the position as many as were yielded in it, then its remaining batches."""
        state = dict(state)
        layout = state.pop("layout")
        if layout != self.layout():
            raise ConfigurationError(
                f"{self.name}: the checkpoint's position is in {layout}, "
                f"not in {self.layout()}: "
                "resume with the same data, batch_size, chunk_bytes and processes"
            )
        self.resume_start = LoaderPosition(**state)
        self.position = LoaderPosition(seed=self.resume_start.seed)

    def begin_epoch(self) -> LoaderPosition:
        """The position at the start of the next epoch (an epoch left unfinished counts as done)."""
        if self.position.batches or self.position.chunk_ordinal or self.position.chunk_batch:
            self.end_epoch()
        return self.position

    def end_epoch(self) -> None:
        position = self.position
        position.epoch_batches.append(position.batches)
        position.epoch, position.batches, position.chunk_ordinal, position.chunk_batch = (
            position.epoch + 1,
            0,
            0,
            0,
        )
