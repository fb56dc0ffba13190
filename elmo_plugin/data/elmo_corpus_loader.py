"""DataLoader `elmo_corpus`: batches of the `elmo_corpus` reader in an order that is a function
of (seed, epoch), so a resumed run (`allennlp train -r`, with the `elmo_corpus_resume` trainer
callback) continues with exactly the batches the killed run had not trained on, without
reading what came before."""

import logging
import math
import os
import queue as queue_errors
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Union

import torch
import torch.multiprocessing as mp
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import is_distributed
from allennlp.data import Instance, Vocabulary
from allennlp.data.data_loaders.data_collator import DataCollator, DefaultDataCollator
from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.nn import util as nn_util

from elmo_plugin.data.elmo_corpus_reader import (
    ElmoCorpusReader,
    is_compressed,
    resolve_corpus_paths,
)

logger = logging.getLogger(__name__)

LENGTH_SAMPLE_CHUNKS = 8  # chunks read to estimate the first epoch's length
WORKER_QUEUE_BATCHES = 64  # batches a loader worker may hold ready (about a chunk's worth)
END_OF_CHUNK = "end of chunk"


@dataclass(frozen=True)
class CorpusChunk:
    """Lines of `path` that start at a byte offset in [start, end); `end=None`: the whole file."""

    path: str
    start: int
    end: Optional[int]


def corpus_chunks(pattern: str, chunk_bytes: int) -> list[CorpusChunk]:
    """The corpus cut into chunks of about `chunk_bytes` (at least half of it, at most 1.5x) per
    plain shard, from file sizes only; a compressed shard is one chunk (it cannot be seeked)."""
    chunks = []
    for path in resolve_corpus_paths(pattern):
        if is_compressed(path):
            chunks.append(CorpusChunk(path, 0, None))
            continue
        size = os.path.getsize(path)
        count = max(1, round(size / chunk_bytes))
        chunks.extend(
            CorpusChunk(path, size * i // count, size * (i + 1) // count) for i in range(count)
        )
    return chunks


def chunk_size(chunk: CorpusChunk) -> int:
    """A chunk's bytes on disk (a whole compressed shard: its compressed size)."""
    return (chunk.end if chunk.end is not None else os.path.getsize(chunk.path)) - chunk.start


@dataclass
class LoaderPosition:
    """Where the loader stands: `epoch` (0-based) being read, `batches` it yielded in it, and the
    next batch to read: batch `chunk_batch` of the chunk at `chunk_ordinal` in the epoch's chunk
    order; `epoch_batches`: how many batches each finished epoch had."""

    seed: int
    epoch: int = 0
    batches: int = 0
    chunk_ordinal: int = 0
    chunk_batch: int = 0
    epoch_batches: list[int] = field(default_factory=list)


@DataLoader.register("elmo_corpus")
class ElmoCorpusLoader(DataLoader):
    """
    Batches of `batch_size` instances from an `elmo_corpus` reader. The corpus is cut into chunks
    of about `chunk_bytes` (byte ranges of plain shards, found by seeking; a compressed shard is
    one chunk). With `shuffle`, the chunk order is shuffled by (seed, epoch) and the instances of
    a chunk by (seed, epoch, chunk); each chunk is split into nearly equal batches of at most
    `batch_size`. So batch k of epoch e is the same in every run, whatever `num_workers`: worker
    w of N builds the chunks w, w + N, ... of the epoch's order and the batches are taken from
    the workers in that order. Under distributed training every process reads every chunk and
    takes every world_size-th of its batches, so all processes have the same number of batches
    (a chunk with fewer instances than processes repeats some, as torch's DistributedSampler).

    `resume_from` (called by the `elmo_corpus_resume` callback) starts at a saved position:
    the batches before it are yielded as empty placeholders, which allennlp's trainer skips.

    # Parameters

    reader : `ElmoCorpusReader`
        The `elmo_corpus` dataset reader (allennlp passes the config's `dataset_reader`).
    data_path : `str`
        The corpus: a file, folder or glob of shards (allennlp passes the config's data path).
    batch_size : `int`
        The most instances (sentences or windows) in a batch.
    shuffle : `bool`, optional (default = `False`)
        Shuffle the chunk order and the instances of each chunk, by seed and epoch.
    chunk_bytes : `int`, optional (default = `1 << 20`)
        About how many bytes of a plain shard make one chunk.
    num_workers : `int`, optional (default = `0`)
        Worker processes that read and batch chunks; 0 reads in the main process.
    seed : `int`, optional (default = `None`)
        The shuffling seed; `None` draws one from Python's `random`, which allennlp's
        `random_seed` seeds.
    cuda_device : `Union[int, str, torch.device]`, optional (default = `None`)
        Where batches are moved; `None` leaves them on the CPU until the trainer sets a device.
    collate_fn : `DataCollator`, optional (default = `None`)
        Builds a batch's tensors; `None` means allennlp's `DefaultDataCollator`.
    """

    def __init__(
        self,
        reader: ElmoCorpusReader,
        data_path: str,
        batch_size: int,
        shuffle: bool = False,
        chunk_bytes: int = 1 << 20,
        num_workers: int = 0,
        seed: Optional[int] = None,
        cuda_device: Optional[Union[int, str, torch.device]] = None,
        collate_fn: Optional[DataCollator] = None,
    ) -> None:
        if not isinstance(reader, ElmoCorpusReader):
            raise ConfigurationError(
                "data_loader elmo_corpus: needs the elmo_corpus dataset reader"
            )
        for key, value, least in (
            ("batch_size", batch_size, 1),
            ("chunk_bytes", chunk_bytes, 1),
            ("num_workers", num_workers, 0),
        ):
            if value < least:
                raise ConfigurationError(
                    f"data_loader elmo_corpus: {key} must be at least {least}, got {value}"
                )
        self.reader = reader
        self.data_path = data_path
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.num_workers = num_workers
        self.collate_fn = collate_fn or DefaultDataCollator()
        self.chunks = corpus_chunks(data_path, chunk_bytes)
        self.world_size, self.rank = (
            (torch.distributed.get_world_size(), torch.distributed.get_rank())
            if is_distributed()
            else (1, 0)
        )
        self.position = LoaderPosition(seed=random.randrange(2**32) if seed is None else seed)
        self._resume_start: Optional[LoaderPosition] = None  # set by resume_from
        self._estimated_length: Optional[int] = None  # see __len__
        self._vocab: Optional[Vocabulary] = None
        self._device: Optional[torch.device] = (
            None if cuda_device is None else torch.device(cuda_device)
        )

    # --- allennlp's DataLoader interface ---

    def index_with(self, vocab: Vocabulary) -> None:
        self._vocab = vocab

    def set_target_device(self, device: torch.device) -> None:
        self._device = device

    def iter_instances(self) -> Iterator[Instance]:
        """Every instance of the corpus in file order (for vocabularies), indexed once
        `index_with` was called."""
        for chunk in self.chunks:
            for instance in self.reader.range_instances(chunk.path, chunk.start, chunk.end):
                yield self._indexed(instance)

    def __iter__(self) -> Iterator[TensorDict]:
        """One epoch's batches (the next epoch on every call)."""
        if self._vocab is None:
            raise ValueError("data_loader elmo_corpus: call index_with(vocab) before iterating")
        position = self._begin_epoch()
        start = self._resume_start
        if start is not None:
            replayed = position.epoch < start.epoch
            for _ in range(start.epoch_batches[position.epoch] if replayed else start.batches):
                position.batches += 1
                yield {}  # a batch the trainer skips; nothing was read for it
            if replayed:
                self._end_epoch()
                return
            position.chunk_ordinal, position.chunk_batch = start.chunk_ordinal, start.chunk_batch
            self._resume_start = None
        for ordinal, batch in self._batches(
            position.epoch, position.chunk_ordinal, position.chunk_batch
        ):
            if ordinal != position.chunk_ordinal:
                position.chunk_ordinal, position.chunk_batch = ordinal, 0
            position.chunk_batch += 1
            position.batches += 1
            yield batch if self._device is None else nn_util.move_to_device(batch, self._device)
        self._end_epoch()

    def __len__(self) -> int:
        """This process's batches per epoch, which allennlp's progress bar shows as its total and
        passes to learning-rate schedulers as `num_steps_per_epoch`. Exact once an epoch has been
        read (every epoch has the same batches, in another order); before that an estimate
        (`length_is_estimate`) from a sample of chunks, read once."""
        finished = self.position.epoch_batches or (
            self._resume_start.epoch_batches if self._resume_start is not None else []
        )
        if finished:
            return max(finished)  # (an epoch broken off early counts fewer)
        if self._estimated_length is None:
            self._estimated_length = self.estimated_batches()
        return self._estimated_length

    @property
    def length_is_estimate(self) -> bool:
        """Whether `len(self)` is still the estimate (no epoch read yet)."""
        finished = self._resume_start.epoch_batches if self._resume_start is not None else []
        return not (self.position.epoch_batches or finished)

    def estimated_batches(self) -> int:
        """Batches per epoch estimated from up to `LENGTH_SAMPLE_CHUNKS` chunks spread over the
        corpus: their instances per byte of shard (for a compressed shard, per compressed byte)
        times each chunk's bytes."""
        step = max(1, len(self.chunks) // LENGTH_SAMPLE_CHUNKS)
        sample = self.chunks[::step][:LENGTH_SAMPLE_CHUNKS]
        instances = sum(
            1 for c in sample for _ in self.reader.range_instances(c.path, c.start, c.end)
        )
        per_byte = instances / max(sum(map(chunk_size, sample)), 1)
        per_batch = self.world_size * self.batch_size
        estimate = sum(math.ceil(per_byte * chunk_size(c) / per_batch) for c in self.chunks)
        logger.info(
            "data_loader elmo_corpus: about %d batches per epoch, estimated from %d of %d chunks "
            "(exact from the second epoch on)",
            estimate,
            len(sample),
            len(self.chunks),
        )
        return estimate

    # --- positions, for exact resume ---

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch yielded and the layout it is a position in (plain
        Python values, for a checkpoint)."""
        return {**asdict(self.position), "layout": self.layout()}

    def layout(self) -> str:
        """What a position means: the same chunks, batch size and number of processes."""
        return (
            f"{len(self.chunks)} chunks of {self.data_path}, batch_size {self.batch_size}, "
            f"{self.world_size} processes"
        )

    def resume_from(self, state: dict[str, Any]) -> None:
        """Continue at a `state_dict()` position, from epoch 0 on (as allennlp's trainer replays
        the finished epochs): each finished epoch yields as many placeholders as it had batches,
        the epoch of the position as many as were yielded in it, then its remaining batches."""
        state = dict(state)
        layout = state.pop("layout")
        if layout != self.layout():
            raise ConfigurationError(
                f"data_loader elmo_corpus: the checkpoint's position is in {layout}, "
                f"not in {self.layout()}: "
                "resume with the same data, batch_size, chunk_bytes and processes"
            )
        self._resume_start = LoaderPosition(**state)
        self.position = LoaderPosition(seed=self._resume_start.seed)

    def _begin_epoch(self) -> LoaderPosition:
        """The position at the start of the next epoch (an epoch left unfinished counts as done)."""
        if self.position.batches or self.position.chunk_ordinal or self.position.chunk_batch:
            self._end_epoch()
        return self.position

    def _end_epoch(self) -> None:
        position = self.position
        position.epoch_batches.append(position.batches)
        position.epoch, position.batches, position.chunk_ordinal, position.chunk_batch = (
            position.epoch + 1,
            0,
            0,
            0,
        )

    # --- the epoch's order ---

    def chunk_order(self, epoch: int) -> list[int]:
        """Indices into `self.chunks` in the order epoch `epoch` reads them."""
        order = list(range(len(self.chunks)))
        if self.shuffle:
            # A string seed is hashed with SHA-512: the same in every process and run.
            random.Random(f"{self.position.seed}/{epoch}").shuffle(order)
        return order

    def chunk_batches(self, epoch: int, chunk_index: int) -> list[list[Instance]]:
        """This process's batches of one chunk in epoch `epoch` (instances not yet indexed)."""
        chunk = self.chunks[chunk_index]
        instances = list(self.reader.range_instances(chunk.path, chunk.start, chunk.end))
        if not instances:
            return []
        if self.shuffle:
            random.Random(f"{self.position.seed}/{epoch}/{chunk_index}").shuffle(instances)
        per_process = math.ceil(len(instances) / (self.world_size * self.batch_size))
        total = per_process * self.world_size
        while len(instances) < total:  # fewer instances than processes x batches: repeat some
            instances += instances[: total - len(instances)]
        bounds = [len(instances) * t // total for t in range(total + 1)]
        return [
            instances[bounds[t] : bounds[t + 1]] for t in range(self.rank, total, self.world_size)
        ]

    def _chunk_tensors(self, epoch: int, chunk_index: int, skip: int) -> Iterator[TensorDict]:
        """The collated batches of one chunk from its batch `skip` on."""
        for batch in self.chunk_batches(epoch, chunk_index)[skip:]:
            yield self.collate_fn([self._indexed(instance) for instance in batch])

    def _indexed(self, instance: Instance) -> Instance:
        self.reader.apply_token_indexers(instance)
        if self._vocab is not None:
            instance.index_fields(self._vocab)
        return instance

    def _batches(self, epoch: int, first_ordinal: int, skip: int) -> Iterator[tuple]:
        """(chunk ordinal, batch) for the epoch, from batch `skip` of chunk ordinal
        `first_ordinal` on."""
        order = self.chunk_order(epoch)
        if self.num_workers == 0:
            for ordinal in range(first_ordinal, len(order)):
                for batch in self._chunk_tensors(
                    epoch, order[ordinal], skip if ordinal == first_ordinal else 0
                ):
                    yield ordinal, batch
            return
        yield from self._worker_batches(epoch, order, first_ordinal, skip)

    # --- loader worker processes ---

    def _worker_batches(
        self, epoch: int, order: list[int], first_ordinal: int, skip: int
    ) -> Iterator[tuple]:
        """`_batches` built by `num_workers` processes: worker w builds the chunk ordinals
        first_ordinal + w, + w + N, ...; their batches are taken in ordinal order."""
        context = mp.get_context("fork")
        queues = [context.Queue(maxsize=WORKER_QUEUE_BATCHES) for _ in range(self.num_workers)]
        consumed = context.Event()
        workers = [
            context.Process(
                target=self._worker,
                args=(w, epoch, order, first_ordinal, skip, queues[w], consumed, os.getpid()),
                daemon=True,
            )
            for w in range(self.num_workers)
        ]
        for worker in workers:
            worker.start()
        try:
            for ordinal in range(first_ordinal, len(order)):
                w = (ordinal - first_ordinal) % self.num_workers
                while (item := _get(queues[w], workers[w])) != END_OF_CHUNK:
                    yield ordinal, item
        finally:
            consumed.set()
            for worker in workers:
                worker.join(timeout=5.0)
                if worker.is_alive():
                    worker.terminate()
                    worker.join()

    def _worker(
        self,
        w: int,
        epoch: int,
        order: list[int],
        first_ordinal: int,
        skip: int,
        queue,
        consumed,
        parent: int,
    ) -> None:
        try:
            for ordinal in range(first_ordinal + w, len(order), self.num_workers):
                for batch in self._chunk_tensors(
                    epoch, order[ordinal], skip if ordinal == first_ordinal else 0
                ):
                    _put(queue, batch, parent)
                _put(queue, END_OF_CHUNK, parent)
        except Exception as error:  # the main process raises it
            _put(queue, WorkerFailure(f"data_loader elmo_corpus worker {w}: {error!r}"), parent)
        # The main process receives a batch's tensors from this process (torch shares them by
        # file descriptor), so it stays until all were taken.
        while not consumed.wait(timeout=1.0) and os.getppid() == parent:
            pass


class WorkerFailure(RuntimeError):
    """An error raised in a loader worker, re-raised in the main process."""


def _put(queue, item, parent: int) -> None:
    """Puts `item`, waiting while the queue is full; exits when the main process died."""
    while True:
        try:
            queue.put(item, timeout=1.0)
            return
        except queue_errors.Full:
            if os.getppid() != parent:
                os._exit(0)


def _get(queue, worker) -> Any:
    """The next item from a worker's queue; its error re-raised, or an error if it died."""
    while True:
        try:
            item = queue.get(timeout=1.0)
        except queue_errors.Empty:
            if worker.is_alive():
                continue
            try:
                item = queue.get(timeout=1.0)
            except queue_errors.Empty:
                raise WorkerFailure(
                    f"data_loader elmo_corpus: a worker exited with code {worker.exitcode}"
                ) from None
        if isinstance(item, WorkerFailure):
            raise item
        return item
