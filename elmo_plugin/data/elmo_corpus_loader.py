"""DataLoader `elmo_corpus`: batches of the `elmo_corpus` reader in an order that is a function
of (seed, epoch), so a resumed run (`allennlp train -r`, with the `elmo_corpus_resume` trainer
callback) continues with exactly the batches the killed run had not trained on, without
reading what came before."""

import logging
import math
import random
from collections.abc import Iterator
from typing import Optional, Union, cast

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Instance
from allennlp.data.data_loaders.data_collator import DataCollator
from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.data.fields import TextField

from elmo_plugin.data.corpus_chunks import chunk_size
from elmo_plugin.data.corpus_data_loader import CorpusDataLoader
from elmo_plugin.data.corpus_stats import CorpusStats
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.loader_workers import worker_results

logger = logging.getLogger(__name__)

LENGTH_SAMPLE_CHUNKS = 8  # chunks read to estimate the first epoch's length


@DataLoader.register("elmo_corpus")
class ElmoCorpusLoader(CorpusDataLoader):
    """
    Batches of `batch_size` instances from an `elmo_corpus` reader. The corpus is cut into chunks
    of about `chunk_bytes` (byte ranges of plain shards, found by seeking; a compressed shard is
    one chunk). With `shuffle`, the chunk order is shuffled by (seed, epoch) and the instances of
    a chunk by (seed, epoch, chunk); each chunk is split into nearly equal batches of at most
    `batch_size` (with `fixed_shape`, padded to exactly `batch_size`). So batch k of epoch e is
    the same in every run, whatever `num_workers`: worker w of N builds the chunks w, w + N, ...
    of the epoch's order and the batches are taken from the workers in that order. Under
    distributed training every process reads every chunk and takes every world_size-th of its
    batches, so all processes have the same number of batches (a chunk with fewer instances
    than processes repeats some, as torch's DistributedSampler).

    `resume_from` (called by the `elmo_corpus_resume` callback) starts at a saved position:
    the batches before it are yielded as empty placeholders, which allennlp's trainer skips,
    and nothing before its chunk is read.

    # Parameters

    reader : `ElmoCorpusReader`
        The `elmo_corpus` dataset reader (allennlp passes the config's `dataset_reader`).
    data_path : `str`
        The corpus: a file, a folder of shards or a glob (allennlp passes the config's data path).
    batch_size : `int`
        The most instances (sentences or windows) in a batch.
    shuffle : `bool`, optional (default = `False`)
        Shuffle the chunk order and the instances of each chunk, by seed and epoch.
    bucket_by_length : `bool`, optional (default = `False`)
        Batch instances of similar length (the least padding, as allennlp's `bucket` batch
        sampler): a chunk's instances are sorted by their number of tokens (after shuffling,
        so instances of one length still mix) before they are cut into batches, and with
        `shuffle` the chunk's batches are then shuffled.
    fixed_shape : `bool`, optional (default = `False`)
        Every batch has one shape, for GPU steps that never see a new one: `batch_size` rows
        of the reader's longest window (`max_sequence_length` + 2 positions, for `<S>` and
        `</S>`) in every tensor, padded with zeros (rows and positions of no token, no
        target); the batches' content is the same as without it. Needs the reader's
        `max_sequence_length`.
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

    name = "data_loader elmo_corpus"

    def __init__(
        self,
        reader: ElmoCorpusReader,
        data_path: str,
        batch_size: int,
        shuffle: bool = False,
        bucket_by_length: bool = False,
        fixed_shape: bool = False,
        chunk_bytes: int = 1 << 20,
        num_workers: int = 0,
        seed: Optional[int] = None,
        cuda_device: Optional[Union[int, str, torch.device]] = None,
        collate_fn: Optional[DataCollator] = None,
    ) -> None:
        super().__init__(
            reader, data_path, batch_size, shuffle, chunk_bytes, seed, cuda_device, collate_fn
        )
        self.check_at_least(num_workers=(num_workers, 0))
        self.num_workers = num_workers
        self.bucket_by_length = bucket_by_length
        if fixed_shape:
            if reader.max_sequence_length is None:
                raise ConfigurationError(
                    f"{self.name}: fixed_shape needs the dataset reader's max_sequence_length "
                    "(the longest window, the batches' length)"
                )
            self.fixed_timesteps = reader.max_sequence_length + 2  # <S> ... </S>
        self._estimated_length: Optional[int] = None  # see __len__

    def __len__(self) -> int:
        """This process's batches per epoch. Exact once an epoch has been read (every epoch has
        the same batches, in another order); before that an estimate (`length_is_estimate`)
        from a sample of chunks, read once."""
        finished = self.finished_epoch_batches()
        if finished:
            return max(finished)  # (an epoch broken off early counts fewer)
        if self._estimated_length is None:
            self._estimated_length = self.estimated_batches()
        return self._estimated_length

    @property
    def length_is_estimate(self) -> bool:
        """Whether `len(self)` is still the estimate (no epoch read yet)."""
        return not self.finished_epoch_batches()

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

    # --- the epoch's batches ---

    def epoch_batches(
        self, epoch: int, first_ordinal: int, skip: int
    ) -> Iterator[tuple[int, TensorDict]]:
        """(chunk ordinal, batch) for the epoch, from batch `skip` of chunk ordinal
        `first_ordinal` on; built by `num_workers` worker processes, if any, in the same order.
        An epoch read from its start is a read of every chunk (`finish_read`)."""
        order = self.chunk_order(epoch)

        def ordinal_batches(ordinal: int) -> Iterator[Union[TensorDict, CorpusStats]]:
            return self.chunk_tensors(
                epoch, order[ordinal], skip if ordinal == first_ordinal else 0
            )

        ordinals = list(range(first_ordinal, len(order)))
        if self.num_workers:
            items = worker_results(ordinal_batches, ordinals, self.num_workers, self.name)
        else:
            items = ((ordinal, item) for ordinal in ordinals for item in ordinal_batches(ordinal))
        read = CorpusStats()
        for ordinal, item in items:
            if isinstance(item, CorpusStats):
                self.tally(read, item)
            else:
                yield ordinal, item
        if first_ordinal == 0 and skip == 0:
            self.finish_read(read)

    def chunk_batches(
        self, epoch: int, chunk_index: int, stats: CorpusStats
    ) -> list[list[Instance]]:
        """This process's batches of one chunk in epoch `epoch` (instances not yet indexed);
        what the chunk's lines were is counted in `stats`."""
        chunk = self.chunks[chunk_index]
        instances = list(self.reader.range_instances(chunk.path, chunk.start, chunk.end, stats))
        if not instances:
            return []
        shuffled = random.Random(f"{self.position.seed}/{epoch}/{chunk_index}")
        if self.shuffle:
            shuffled.shuffle(instances)
        per_process = math.ceil(len(instances) / (self.world_size * self.batch_size))
        total = per_process * self.world_size
        while len(instances) < total:  # fewer instances than processes x batches: repeat some
            instances += instances[: total - len(instances)]
        if self.bucket_by_length:  # (stable: instances of one length stay shuffled)
            instances.sort(key=lambda instance: len(cast(TextField, instance["source"])))
        bounds = [len(instances) * t // total for t in range(total + 1)]
        batches = [instances[bounds[t] : bounds[t + 1]] for t in range(total)]
        if self.bucket_by_length and self.shuffle:
            shuffled.shuffle(batches)
        return batches[self.rank :: self.world_size]

    def chunk_tensors(
        self, epoch: int, chunk_index: int, skip: int
    ) -> Iterator[Union[TensorDict, CorpusStats]]:
        """The collated batches of one chunk from its batch `skip` on, then the chunk's
        `CorpusStats`."""
        stats = CorpusStats()
        for batch in self.chunk_batches(epoch, chunk_index, stats)[skip:]:
            yield self.collate(batch)
        yield stats
