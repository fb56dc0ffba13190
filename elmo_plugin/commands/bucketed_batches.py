"""`elmo-embed`'s batches of fixed shapes (its path on a GPU): sentences sorted by length, each
batch padded to a bucket of (rows, width), so that a few shapes serve a whole corpus."""

import itertools
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy
import torch

# Padded tokens per sentence (<S> and </S> included) of the buckets, each at most 1.5 times the
# one before (at most a third of a batch is padding); longer sentences are padded to a multiple
# of LONG_WIDTH.
BUCKET_WIDTHS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
LONG_WIDTH = 256


def bucket_width(width: int) -> int:
    """A sentence's padded tokens (<S> and </S> included) -> its bucket's width."""
    for bucket in BUCKET_WIDTHS:
        if width <= bucket:
            return bucket
    return -(-width // LONG_WIDTH) * LONG_WIDTH


def bucket_rows(width: int, batch_size: int, batch_tokens: int) -> int:
    """The sentences of a bucket's batch: at most `batch_size`, and at most `batch_tokens` padded
    tokens in all (at least one sentence)."""
    return max(1, min(batch_size, batch_tokens // width))


class Bucket(NamedTuple):
    """A batch of (line number, tokens) pairs, padded to `rows` sentences of `width` tokens."""

    batch: list[tuple[int, list[str]]]
    rows: int
    width: int


def bucketed_batches(
    chunk: list[tuple[int, list[str]]], batch_size: int, batch_tokens: int
) -> Iterator[Bucket]:
    """(line number, tokens) pairs -> batches, shortest sentences first, each of one bucket
    width, at most `bucket_rows` sentences (the last of a width padded with empty rows)."""
    chunk = sorted(chunk, key=lambda item: len(item[1]))
    for width, same in itertools.groupby(chunk, key=lambda item: bucket_width(len(item[1]) + 2)):
        group = list(same)
        rows = bucket_rows(width, batch_size, batch_tokens)
        for start in range(0, len(group), rows):
            yield Bucket(group[start : start + rows], rows, width)


class IdTable(NamedTuple):
    """A window's token ids on the host: `rows` maps each distinct token text (and the sentence
    boundaries) to its row of `table` (texts + 1, ids per token); row 0 is all zeros (padding)."""

    rows: dict[str, int]
    table: numpy.ndarray


def id_table(
    chunk: list[tuple[int, list[str]]],
    ids: Callable[[str], list[int]],
    boundaries: tuple[str, str],
) -> IdTable:
    """The ids of every distinct token text of `chunk`, each computed once."""
    texts = dict.fromkeys(itertools.chain(boundaries, *(tokens for _, tokens in chunk)))
    rows = {text: row for row, text in enumerate(texts, start=1)}
    table = numpy.array([ids(text) for text in texts], dtype=numpy.int64)
    return IdTable(rows, numpy.concatenate([numpy.zeros_like(table[:1]), table]))


def bucket_ids(bucket: Bucket, ids: IdTable, boundaries: tuple[str, str]) -> torch.Tensor:
    """A bucket -> its token ids (rows, width, ids per token): `<S> w1 .. wn </S>` rows, all-zero
    ids past each sentence and in the padding rows. Built on the host."""
    bos, eos = (ids.rows[text] for text in boundaries)
    index = numpy.zeros((bucket.rows, bucket.width), dtype=numpy.int64)
    for row, (_, tokens) in enumerate(bucket.batch):
        index[row, : len(tokens) + 2] = [bos, *map(ids.rows.__getitem__, tokens), eos]
    return torch.from_numpy(ids.table[index])
