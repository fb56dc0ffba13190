"""DataLoader `elmo_streams`: bilm-tf's training layout. The `elmo_corpus` reader's tokens (each
line wrapped in `<S>` ... `</S>`) are concatenated in line order and cut into continuous streams,
one per batch row, read in fixed windows with no padding but at each stream's end; every batch
also holds the backward direction's own stream (the same text reversed)."""

import bisect
import itertools
import math
from collections.abc import Iterator
from typing import Optional, Union, cast

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Instance
from allennlp.data.data_loaders.data_collator import DataCollator
from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.data.fields import TensorField, TextField

from elmo_plugin.data.corpus_chunks import CorpusChunk, split_chunk
from elmo_plugin.data.corpus_data_loader import CorpusDataLoader
from elmo_plugin.data.corpus_stats import CorpusStats
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_text_field import ElmoTextField

# The unit a stream reads at a time (bytes of a plain shard): a loader holds at most one piece's
# tokens per stream and direction, whatever the corpus size.
PIECE_BYTES = 1 << 16


def stream_bounds(total: int, streams: int) -> list[int]:
    """Token offsets cutting `total` tokens into `streams` contiguous streams whose lengths
    differ by at most one: stream s is [bounds[s], bounds[s + 1])."""
    return [total * s // streams for s in range(streams + 1)]


def window_count(length: int, window_size: int) -> int:
    """Windows a stream of `length` tokens has: each predicts up to `window_size` next tokens."""
    return math.ceil(max(length - 1, 0) / window_size)


def stream_windows(texts: Iterator[str], window_size: int) -> Iterator[list[str]]:
    """The windows of the stream `texts`, endlessly: window k is tokens [kT, kT + T] (T + 1
    tokens, fewer at the end): the first T are read, the last T predicted, so a window's last
    token is the next one's first. Once the stream has ended, its last token alone (read,
    nothing predicted), so no row is ever empty."""
    window = list(itertools.islice(texts, window_size + 1))
    while True:
        yield window
        window = window[-1:] + list(itertools.islice(texts, window_size))


@DataLoader.register("elmo_streams")
class ElmoStreamsLoader(CorpusDataLoader):
    """
    Batches of `batch_size` rows, row r reading stream r: the corpus's tokens (every line of
    every chunk, `<S>` ... `</S>` per line or `max_sequence_length` window of the reader) in
    order, cut into `batch_size` x processes streams of nearly equal length (a stream boundary
    may fall inside a line). Batch k holds window k of every stream: `source`, the forward text
    (batch, <= window_size + 1 tokens); `backward_source`, window k of the same stream reversed
    (so the backward LM reads it left to right as bilm-tf's reversed dataset);
    `stream_start` (batch,) bool, True in window 0 (a stateful model resets that row there).
    Consecutive windows overlap by one token: the token a window predicts last is the one the
    next window reads first, so every token is predicted once per epoch in each direction but
    a stream's first (forward) or last (backward).

    With `shuffle`, the chunks (of about `chunk_bytes`, as in `elmo_corpus`) are read in an
    order drawn from (seed, epoch); lines keep their order within a chunk. Under distributed
    training process p takes streams p * batch_size ... (p + 1) * batch_size - 1, and every
    process has the same number of batches (that of the longest stream): a process whose
    streams have all ended reads their last tokens alone, a batch with nothing to predict.

    Memory grows with `batch_size`, not with the corpus: every process counts the tokens of
    each piece of the corpus (about 64 KiB of a plain shard) once, on its first epoch, and
    from then on reads only its own streams, one piece per stream and direction at a time (a
    compressed shard is one piece: keep those shards small). Exact resume
    (`elmo_corpus_resume`) restarts at the checkpoint's batch, reading each stream from that
    window on; a model's carried state then starts from zero.

    # Parameters

    reader : `ElmoCorpusReader`
        The `elmo_corpus` dataset reader (allennlp passes the config's `dataset_reader`).
    data_path : `str`
        The corpus: a file, a folder of shards or a glob (allennlp passes the config's data path).
    batch_size : `int`
        Streams per process: the rows of a batch.
    window_size : `int`, optional (default = `20`)
        Tokens each window predicts per row (a window reads `window_size + 1` tokens at most).
    fixed_shape : `bool`, optional (default = `False`)
        Every batch has one shape, for GPU steps that never see a new one: `window_size + 1`
        positions in every tensor, padded with zeros (no token, no target). Without it the
        epoch's last batch is shorter where its streams end before a full window.
    shuffle : `bool`, optional (default = `False`)
        Read the chunks in an order drawn from (seed, epoch).
    chunk_bytes : `int`, optional (default = `1 << 20`)
        About how many bytes of a plain shard make one chunk.
    num_workers : `int`, optional (default = `0`)
        Must be 0: streams are read in order, in the main process.
    seed : `int`, optional (default = `None`)
        The shuffling seed; `None` draws one from Python's `random`, which allennlp's
        `random_seed` seeds.
    cuda_device : `Union[int, str, torch.device]`, optional (default = `None`)
        Where batches are moved; `None` leaves them on the CPU until the trainer sets a device.
    collate_fn : `DataCollator`, optional (default = `None`)
        Builds a batch's tensors; `None` means allennlp's `DefaultDataCollator`.
    """

    name = "data_loader elmo_streams"

    def __init__(
        self,
        reader: ElmoCorpusReader,
        data_path: str,
        batch_size: int,
        window_size: int = 20,
        fixed_shape: bool = False,
        shuffle: bool = False,
        chunk_bytes: int = 1 << 20,
        num_workers: int = 0,
        seed: Optional[int] = None,
        cuda_device: Optional[Union[int, str, torch.device]] = None,
        collate_fn: Optional[DataCollator] = None,
    ) -> None:
        super().__init__(
            reader, data_path, batch_size, shuffle, chunk_bytes, seed, cuda_device, collate_fn
        )
        self.check_at_least(window_size=(window_size, 1))
        if num_workers:
            raise ConfigurationError(
                f"{self.name}: num_workers must be 0 (streams are read in order)"
            )
        self.window_size = window_size
        self.fixed_timesteps = window_size + 1 if fixed_shape else None
        self.pieces = [split_chunk(chunk, min(chunk_bytes, PIECE_BYTES)) for chunk in self.chunks]
        self._piece_counts: Optional[list[list[int]]] = None

    def layout(self) -> str:
        return f"{super().layout()}, window_size {self.window_size} (elmo_streams)"

    def __len__(self) -> int:
        """Exact: the windows of the longest stream, from the corpus's token count (the one read
        of the corpus that the first epoch needs anyway)."""
        return self.process_streams(sum(map(sum, self.piece_counts())))[1]

    def piece_texts(self, piece: CorpusChunk, stats: Optional[CorpusStats] = None) -> list[str]:
        """Every token's text of one piece, in order (strings: no Token objects); what its lines
        were is counted in `stats`."""
        texts: list[str] = []
        for instance in self.reader.range_instances(piece.path, piece.start, piece.end, stats):
            field = cast(TextField, instance["source"])
            texts.extend(
                field.texts
                if isinstance(field, ElmoTextField)
                else [t.ensure_text() for t in field.tokens]
            )
        return texts

    def piece_counts(self) -> list[list[int]]:
        """Tokens per piece of each chunk (`self.pieces[c][i]` has `counts[c][i]`), counted by
        one read of the corpus on first use (`finish_read`); an epoch's order only permutes the
        chunks."""
        if self._piece_counts is None:
            read = CorpusStats()
            counts = [
                [self.count_tokens(piece, read) for piece in pieces] for pieces in self.pieces
            ]
            self.finish_read(read)
            self._piece_counts = counts
        return self._piece_counts

    def count_tokens(self, piece: CorpusChunk, read: CorpusStats) -> int:
        """The tokens of one piece, its lines counted in the `read` of the corpus."""
        stats = CorpusStats()
        tokens = len(self.piece_texts(piece, stats))
        self.tally(read, stats)
        return tokens

    def epoch_pieces(self, epoch: int) -> tuple[list[CorpusChunk], list[int]]:
        """(the pieces in the order epoch `epoch` reads them, the token offset where each starts
        in the epoch's text, plus the total at the end)."""
        counts = self.piece_counts()
        order = self.chunk_order(epoch)
        pieces = [piece for c in order for piece in self.pieces[c]]
        offsets = [0, *itertools.accumulate(n for c in order for n in counts[c])]
        return pieces, offsets

    def stream_texts(
        self, pieces: list[CorpusChunk], offsets: list[int], start: int, stop: int, backward: bool
    ) -> Iterator[str]:
        """The epoch's tokens [start, stop) in order, or from stop - 1 down to start with
        `backward`: one piece read at a time."""
        if start >= stop:
            return
        first, last = (
            bisect.bisect_right(offsets, start) - 1,
            bisect.bisect_right(offsets, stop - 1) - 1,
        )
        for i in range(last, first - 1, -1) if backward else range(first, last + 1):
            texts = self.piece_texts(pieces[i])[max(start - offsets[i], 0) : stop - offsets[i]]
            yield from reversed(texts) if backward else texts

    def process_streams(self, total: int) -> tuple[list[tuple[int, int]], int]:
        """(this process's `batch_size` streams as [start, stop) token offsets of an epoch of
        `total` tokens, the number of batches every process yields: the windows of the longest
        stream of all processes)."""
        if total < 2 * self.batch_size * self.world_size:
            raise ConfigurationError(
                f"data_loader elmo_streams: {self.data_path} has {total} tokens, too few for "
                f"{self.batch_size * self.world_size} streams of at least 2: lower batch_size "
                "or give more text"
            )
        bounds = stream_bounds(total, self.batch_size * self.world_size)
        longest = max(end - start for start, end in itertools.pairwise(bounds))
        first = self.rank * self.batch_size
        return [
            (bounds[s], bounds[s + 1]) for s in range(first, first + self.batch_size)
        ], window_count(longest, self.window_size)

    def epoch_batches(
        self, epoch: int, first_ordinal: int, skip: int
    ) -> Iterator[tuple[int, TensorDict]]:
        """(0, batch) for batches `skip`, `skip` + 1, ... of the epoch: the whole epoch is one
        chunk ordinal of the position, so `skip` is the batch to resume at. Resuming reads from
        each stream's window `skip` on: nothing before it."""
        pieces, offsets = self.epoch_pieces(epoch)
        streams, batches = self.process_streams(offsets[-1])
        directions = []
        for start, stop in streams:
            done = min(skip * self.window_size, stop - start - 1)  # tokens before window `skip`
            forward = self.stream_texts(pieces, offsets, start + done, stop, backward=False)
            backward = self.stream_texts(pieces, offsets, start, stop - done, backward=True)
            directions.append(
                (
                    stream_windows(forward, self.window_size),
                    stream_windows(backward, self.window_size),
                )
            )
        for k in range(skip, batches):
            instances = [
                self._window_instance(next(forward), next(backward), k)
                for forward, backward in directions
            ]
            yield 0, self.collate(instances)

    def _window_instance(self, forward: list[str], backward: list[str], k: int) -> Instance:
        """Window k of a stream, forward and backward (read from the stream's reversed text)."""
        return Instance(
            {
                "source": ElmoTextField(forward),
                "backward_source": ElmoTextField(backward),
                "stream_start": TensorField(torch.tensor(k == 0)),
            }
        )
