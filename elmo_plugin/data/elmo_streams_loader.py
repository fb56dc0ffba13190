"""DataLoader `elmo_streams`: bilm-tf's training layout. The `elmo_corpus` reader's tokens (each
line wrapped in `<S>` ... `</S>`) are concatenated in line order and cut into continuous streams,
one per batch row, read in fixed windows with no padding but at each stream's end; every batch
also holds the backward direction's own stream (the same text reversed)."""
import math
from typing import Iterator, List, Tuple

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Instance
from allennlp.data.data_loaders.data_loader import DataLoader, TensorDict
from allennlp.data.fields import TensorField

from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_text_field import ElmoTextField


def stream_bounds(total: int, streams: int) -> List[int]:
    """Token offsets cutting `total` tokens into `streams` contiguous streams whose lengths
    differ by at most one: stream s is [bounds[s], bounds[s + 1])."""
    return [total * s // streams for s in range(streams + 1)]


def window_count(length: int, window_size: int) -> int:
    """Windows a stream of `length` tokens has: each predicts up to `window_size` next tokens."""
    return math.ceil(max(length - 1, 0) / window_size)


def stream_window(tokens: List[str], k: int, window_size: int) -> List[str]:
    """Window k of a stream: tokens [kT, kT + T] (T + 1 tokens, fewer at the end): the first T
    are read, the last T are predicted, so the last token is the next window's first. A stream
    that has ended gives its last token alone (read, nothing predicted), so no row is empty."""
    start = min(k * window_size, len(tokens) - 1)
    return tokens[start : start + window_size + 1]


@DataLoader.register("elmo_streams")
class ElmoStreamsLoader(ElmoCorpusLoader):
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
    process has the same number of batches (that of the longest stream); every process reads
    the whole corpus to find its streams. Exact resume (`elmo_corpus_resume`) restarts at the
    checkpoint's batch; a model's carried state then starts from zero.
    """

    def __init__(
        self,
        reader: ElmoCorpusReader,
        data_path: str,
        batch_size: int,
        window_size: int = 20,
        shuffle: bool = False,
        chunk_bytes: int = 1 << 20,
        **kwargs,
    ) -> None:
        if not isinstance(reader, ElmoCorpusReader):
            raise ConfigurationError("data_loader elmo_streams: needs the elmo_corpus dataset reader")
        if window_size < 1:
            raise ConfigurationError(f"data_loader elmo_streams: window_size must be at least 1, got {window_size}")
        super().__init__(reader, data_path, batch_size, shuffle=shuffle, chunk_bytes=chunk_bytes, **kwargs)
        if self.num_workers:
            raise ConfigurationError("data_loader elmo_streams: num_workers must be 0 (streams are read in order)")
        self.window_size = window_size

    def layout(self) -> str:
        return f"{super().layout()}, window_size {self.window_size} (elmo_streams)"

    def epoch_tokens(self, epoch: int) -> List[str]:
        """Every token's text in the order epoch `epoch` reads the corpus (strings: no Token
        objects for the whole corpus)."""
        tokens: List[str] = []
        for chunk_index in self.chunk_order(epoch):
            chunk = self.chunks[chunk_index]
            for instance in self.reader.range_instances(chunk.path, chunk.start, chunk.end):
                field = instance["source"]
                tokens.extend(field.texts if isinstance(field, ElmoTextField) else [t.text for t in field.tokens])
        return tokens

    def streams(self, epoch: int) -> Tuple[List[List[str]], int]:
        """(this process's `batch_size` streams of epoch `epoch`, the number of batches every
        process yields: the windows of the longest stream of all processes)."""
        tokens = self.epoch_tokens(epoch)
        if len(tokens) < 2 * self.batch_size * self.world_size:
            raise ConfigurationError(
                f"data_loader elmo_streams: {self.data_path} has {len(tokens)} tokens, too few for "
                f"{self.batch_size * self.world_size} streams of at least 2: lower batch_size"
            )
        bounds = stream_bounds(len(tokens), self.batch_size * self.world_size)
        first = self.rank * self.batch_size
        longest = max(end - start for start, end in zip(bounds, bounds[1:]))
        streams = [tokens[bounds[s] : bounds[s + 1]] for s in range(first, first + self.batch_size)]
        return streams, window_count(longest, self.window_size)

    def _batches(self, epoch: int, first_ordinal: int, skip: int) -> Iterator[tuple]:
        """(0, batch) for batches `skip`, `skip` + 1, ... of the epoch: the whole epoch is one
        ordinal of the inherited position bookkeeping, so `skip` is the batch to resume at."""
        streams, batches = self.streams(epoch)
        reversed_streams = [stream[::-1] for stream in streams]
        for k in range(skip, batches):
            instances = [self._window_instance(*pair, k) for pair in zip(streams, reversed_streams)]
            yield 0, self.collate_fn([self._indexed(instance) for instance in instances])

    def _window_instance(self, stream: List[str], reversed_stream: List[str], k: int) -> Instance:
        """Window k of a stream, forward and backward (read from the stream's reversed text)."""
        forward = stream_window(stream, k, self.window_size)
        backward = stream_window(reversed_stream, k, self.window_size)
        return Instance(
            {
                "source": ElmoTextField(forward),
                "backward_source": ElmoTextField(backward),
                "stream_start": TensorField(torch.tensor(k == 0)),
            }
        )

    def _indexed(self, instance: Instance) -> Instance:
        """`instance` with the reader's token indexers on both text fields, indexed once
        `index_with` was called."""
        if "backward_source" in instance:
            # The reader's indexers, as it gives its own `source`.
            instance["backward_source"].token_indexers = self.reader._token_indexers  # type: ignore[attr-defined]
        return super()._indexed(instance)
