"""How the `elmo_corpus` and `elmo_streams` loaders cut a corpus: chunks (byte ranges of plain
shards, found by seeking; a compressed shard is one chunk), the pieces a chunk is read in, and
the order an epoch reads the chunks in. From file sizes only: nothing here reads the text."""

import os
import random
from dataclasses import dataclass
from typing import Optional

from elmo_plugin.data.elmo_corpus_reader import is_compressed, resolve_corpus_paths


@dataclass(frozen=True)
class CorpusChunk:
    """Lines of `path` that start at a byte offset in [start, end); `end=None`: the whole file."""

    path: str
    start: int
    end: Optional[int]


def byte_ranges(path: str, start: int, end: int, part_bytes: int) -> list[CorpusChunk]:
    """[start, end) of `path` cut into nearly equal consecutive parts of about `part_bytes` (at
    least half of it, at most 1.5x; one part when the range is shorter)."""
    count = max(1, round((end - start) / part_bytes))
    span = end - start
    return [
        CorpusChunk(path, start + span * i // count, start + span * (i + 1) // count)
        for i in range(count)
    ]


def corpus_chunks(pattern: str, chunk_bytes: int) -> list[CorpusChunk]:
    """The corpus cut into chunks of about `chunk_bytes` per plain shard; a compressed shard is
    one chunk (it cannot be seeked)."""
    chunks = []
    for path in resolve_corpus_paths(pattern):
        if is_compressed(path):
            chunks.append(CorpusChunk(path, 0, None))
        else:
            chunks.extend(byte_ranges(path, 0, os.path.getsize(path), chunk_bytes))
    return chunks


def split_chunk(chunk: CorpusChunk, piece_bytes: int) -> list[CorpusChunk]:
    """A chunk as consecutive pieces of about `piece_bytes` (a compressed shard stays whole)."""
    if chunk.end is None:
        return [chunk]
    return byte_ranges(chunk.path, chunk.start, chunk.end, piece_bytes)


def chunk_size(chunk: CorpusChunk) -> int:
    """A chunk's bytes on disk (a whole compressed shard: its compressed size)."""
    return (chunk.end if chunk.end is not None else os.path.getsize(chunk.path)) - chunk.start


def chunk_order(chunks: int, shuffle: bool, seed: int, epoch: int) -> list[int]:
    """Indices of `chunks` chunks in the order epoch `epoch` reads them: shuffled by (seed,
    epoch) with `shuffle`, else in corpus order."""
    order = list(range(chunks))
    if shuffle:
        # A string seed is hashed with SHA-512: the same in every process and run.
        random.Random(f"{seed}/{epoch}").shuffle(order)
    return order
