"""The `elmo_streams` loader's layout: every token of every line once per epoch, in line order
within its stream, backward windows reading the same stream reversed, the same number of
batches in every distributed process, and a resume that yields exactly the remaining batches."""

import itertools
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.data import elmo_streams_loader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_streams_loader import ElmoStreamsLoader, stream_bounds, window_count
from tests.data.test_elmo_corpus_loader import padding, tensors_of, write_corpus
from tests.helpers import text_tokens

WINDOW = 6
ROWS = 3


def make_loader(pattern: str, world: tuple[int, int] = (1, 0), **kwargs) -> ElmoStreamsLoader:
    options: dict[str, Any] = dict(
        batch_size=ROWS, window_size=WINDOW, shuffle=False, chunk_bytes=300, seed=7
    )
    options.update(kwargs)
    loader = ElmoStreamsLoader(ElmoCorpusReader(max_sequence_length=5), pattern, **options)
    loader.world_size, loader.rank = world  # as a distributed process sees it
    loader.index_with(Vocabulary.from_instances(loader.iter_instances()))
    return loader


def file_order_tokens(pattern: str) -> list[str]:
    reader = ElmoCorpusReader(max_sequence_length=5)
    return [t.ensure_text() for instance in reader.read(pattern) for t in text_tokens(instance)]


def rows(loader: ElmoStreamsLoader, batch, field: str) -> list[list[str]]:
    vocab = loader.vocab
    assert vocab is not None
    return [
        [vocab.get_token_from_index(i, "tokens") for i in row if i]
        for row in batch[field]["tokens"]["tokens"].tolist()
    ]


def joined_streams(loader: ElmoStreamsLoader, batches, field: str) -> list[list[str]]:
    """Each row's windows joined back, the one-token overlap of consecutive windows dropped."""
    streams: list[list[str]] = [[] for _ in range(loader.batch_size)]
    for k, batch in enumerate(batches):
        for stream, window in zip(streams, rows(loader, batch, field), strict=True):
            stream.extend(window if k == 0 else window[1:])
    return streams


@pytest.fixture
def pattern(tmp_path: Path) -> str:
    return write_corpus(tmp_path)


def test_streams_hold_every_token_once_in_file_order(pattern):
    loader = make_loader(pattern)
    batches = list(loader)
    streams = joined_streams(loader, batches, "source")
    assert sum(streams, []) == file_order_tokens(pattern)
    lengths = [len(stream) for stream in streams]
    assert max(lengths) - min(lengths) <= 1
    assert all(len(row) <= WINDOW + 1 for batch in batches for row in rows(loader, batch, "source"))


def test_backward_windows_read_each_stream_reversed(pattern):
    loader = make_loader(pattern)
    batches = list(loader)
    forward, backward = (
        joined_streams(loader, batches, "source"),
        joined_streams(loader, batches, "backward_source"),
    )
    assert backward == [stream[::-1] for stream in forward]
    for batch in batches:  # the same number of tokens (same padding) in both directions
        assert rows(loader, batch, "source") and [
            len(r) for r in rows(loader, batch, "source")
        ] == [len(r) for r in rows(loader, batch, "backward_source")]


def test_stream_start_marks_the_first_window_only(pattern):
    starts = [batch["stream_start"].tolist() for batch in make_loader(pattern)]
    assert starts[0] == [True] * ROWS and all(s == [False] * ROWS for s in starts[1:])


def test_shuffle_reorders_chunks_but_keeps_line_order_within_them(pattern):
    loader = make_loader(pattern, shuffle=True)
    first, second = list(loader), list(loader)
    tokens = [sum(joined_streams(loader, epoch, "source"), []) for epoch in (first, second)]
    reference = file_order_tokens(pattern)
    assert tokens[0] != tokens[1] and sorted(tokens[0]) == sorted(reference) == sorted(tokens[1])
    words = [t for t in tokens[0] if t.startswith("w")]
    for a, b in itertools.pairwise(words):  # within a line, token t is followed by t + 1
        (sa, la, ta), (sb, lb, tb) = a[1:].split("_"), b[1:].split("_")
        if (sa, la) == (sb, lb):
            assert int(tb) == int(ta) + 1


def test_processes_read_disjoint_streams_with_the_same_number_of_batches(pattern):
    loaders = [make_loader(pattern, world=(2, rank)) for rank in range(2)]
    epochs = [list(loader) for loader in loaders]
    assert len(epochs[0]) == len(epochs[1])
    streams = [
        s
        for loader, epoch in zip(loaders, epochs, strict=True)
        for s in joined_streams(loader, epoch, "source")
    ]
    assert sum(streams, []) == file_order_tokens(pattern)


def test_resume_yields_placeholders_then_the_remaining_batches(pattern):
    loader = make_loader(pattern, shuffle=True)
    list(loader)
    iterator = iter(loader)
    for _ in range(4):
        next(iterator)
    state = loader.state_dict()
    rest = list(iterator)
    resumed = make_loader(pattern, shuffle=True)
    resumed.resume_from(state)
    assert [b for b in resumed] == [{}] * len(
        list(make_loader(pattern, shuffle=True))
    )  # epoch 0 replayed empty
    again = list(resumed)
    assert again[:4] == [{}] * 4
    for mine, theirs in zip(again[4:], rest, strict=True):
        assert torch.equal(mine["source"]["tokens"]["tokens"], theirs["source"]["tokens"]["tokens"])
        assert torch.equal(
            mine["backward_source"]["elmo"]["elmo_tokens"],
            theirs["backward_source"]["elmo"]["elmo_tokens"],
        )


def test_too_few_tokens_for_the_streams_is_an_error(tmp_path):
    (tmp_path / "tiny.txt").write_text("a b\n")
    loader = make_loader(str(tmp_path / "tiny.txt"), batch_size=4)
    with pytest.raises(ConfigurationError, match="too few for 4 streams"):
        list(loader)


def plain_windows(
    loader: ElmoStreamsLoader, epoch: int
) -> list[tuple[list[list[str]], list[list[str]]]]:
    """The layout computed the plain way: the whole epoch's tokens in memory, cut into streams,
    window k of a stream (reversed for backward) = tokens [kT, kT + T], the last token alone
    once the stream has ended."""
    tokens = [
        t.ensure_text()
        for c in loader.chunk_order(epoch)
        for instance in loader.reader.range_instances(
            loader.chunks[c].path, loader.chunks[c].start, loader.chunks[c].end
        )
        for t in text_tokens(instance)
    ]
    bounds = stream_bounds(len(tokens), loader.batch_size * loader.world_size)
    mine = range(loader.rank * loader.batch_size, (loader.rank + 1) * loader.batch_size)
    streams = [tokens[bounds[s] : bounds[s + 1]] for s in mine]
    batches = max(window_count(b - a, loader.window_size) for a, b in itertools.pairwise(bounds))

    def window(stream: list[str], k: int) -> list[str]:
        start = min(k * loader.window_size, len(stream) - 1)
        return stream[start : start + loader.window_size + 1]

    return [
        ([window(s, k) for s in streams], [window(s[::-1], k) for s in streams])
        for k in range(batches)
    ]


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(shuffle=True),
        dict(shuffle=True, world=(2, 1), window_size=4),
        dict(chunk_bytes=2500, piece_bytes=150, shuffle=True),  # many pieces per chunk
        dict(chunk_bytes=2500, piece_bytes=150, world=(3, 2), batch_size=2, window_size=11),
    ],
)
def test_streamed_windows_equal_the_plain_in_memory_layout_also_when_resumed(
    pattern, monkeypatch, options
):
    options = dict(options)
    monkeypatch.setattr(
        elmo_streams_loader,
        "PIECE_BYTES",
        options.pop("piece_bytes", elmo_streams_loader.PIECE_BYTES),
    )
    loader = make_loader(pattern, **options)
    for epoch in range(2):
        expected = plain_windows(loader, epoch)
        batches = list(loader)
        assert [
            (rows(loader, b, "source"), rows(loader, b, "backward_source")) for b in batches
        ] == expected
    resumed = make_loader(pattern, **options)
    resumed.resume_from(
        {
            **loader.state_dict(),
            "epoch": 1,
            "batches": 3,
            "chunk_ordinal": 0,
            "chunk_batch": 3,
            "epoch_batches": [len(batches)],
        }
    )
    list(resumed)  # epoch 0: placeholders
    again = [b for b in resumed if b]
    assert [
        (rows(resumed, b, "source"), rows(resumed, b, "backward_source")) for b in again
    ] == expected[3:]


def test_a_resumed_epoch_reads_nothing_before_each_streams_window(pattern, monkeypatch):
    monkeypatch.setattr(elmo_streams_loader, "PIECE_BYTES", 150)
    loader = make_loader(pattern, chunk_bytes=2500)
    loader.piece_counts()  # the one counting read
    read = []
    original = loader.piece_texts
    monkeypatch.setattr(loader, "piece_texts", lambda piece: read.append(piece) or original(piece))
    batches = list(loader)
    full = len(read)
    read.clear()
    resumed = make_loader(pattern, chunk_bytes=2500)
    resumed.piece_counts()
    monkeypatch.setattr(resumed, "piece_texts", lambda piece: read.append(piece) or original(piece))
    resumed.resume_from(
        {
            **loader.state_dict(),
            "epoch": 0,
            "batches": len(batches) - 1,
            "chunk_batch": len(batches) - 1,
            "epoch_batches": [],
        }
    )
    assert len([b for b in resumed if b]) == 1
    # The last window of each stream and direction: one or two pieces each, not the whole epoch.
    assert len(read) <= 2 * 2 * ROWS < full


def corpus_of(folder: Path, lines: int) -> str:
    folder.mkdir()
    # The same 500 words whatever the size: the indexer's cache grows with the vocabulary.
    text = (
        "\n".join(" ".join(f"w{(line * 7 + t) % 500}" for t in range(10)) for line in range(lines))
        + "\n"
    )
    (folder / "corpus.txt").write_text(text)
    return str(folder / "corpus.txt")


def epoch_peak_bytes(pattern: str) -> int:
    """Python memory peak while one epoch is read (after the counting read), in bytes."""
    loader = make_loader(pattern, batch_size=8, window_size=20, chunk_bytes=1 << 20)
    loader.piece_counts()
    tracemalloc.start()
    try:
        for _ in loader:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_grows_with_the_batch_not_with_the_corpus(tmp_path, monkeypatch):
    monkeypatch.setattr(
        elmo_streams_loader, "PIECE_BYTES", 1024
    )  # both corpora: streams of many pieces
    small = epoch_peak_bytes(corpus_of(tmp_path / "small", 750))
    large = epoch_peak_bytes(corpus_of(tmp_path / "large", 6_000))  # 8x the tokens: 290 kB of text
    # Holding the epoch's tokens would take about 8x (pieces of a whole chunk, PIECE_BYTES 1 MiB:
    # 6.8x); a piece per stream and direction keeps it flat (1.05x).
    assert large < 1.5 * small, (small, large)


def test_the_length_is_exact_before_the_first_epoch_for_every_process(pattern):
    for world in ((1, 0), (2, 0), (2, 1)):
        loader = make_loader(pattern, world=world, shuffle=True)
        length = len(loader)
        assert not loader.length_is_estimate
        assert length == len(list(loader)) == len(list(loader))


def source_shapes(batches) -> list[tuple[int, ...]]:
    return [tuple(batch["source"]["tokens"]["tokens"].shape) for batch in batches]


@pytest.mark.parametrize("world", [(1, 0), (2, 0), (2, 1)])
def test_without_fixed_shape_only_the_epochs_last_batch_is_shorter(pattern, world):
    """Every batch has a row per stream and, but for the last, full windows (window_size + 1
    tokens); the last holds each stream's remaining tokens, as long as the longest of them."""
    loader = make_loader(pattern, world=world)
    *before, last = source_shapes(loader)
    remaining = max(len(window) for window in plain_windows(loader, 0)[-1][0])
    assert set(before) == {(ROWS, WINDOW + 1)} and last == (ROWS, remaining)
    assert remaining < WINDOW + 1


@pytest.mark.parametrize("world", [(1, 0), (2, 0), (2, 1)])
def test_fixed_shape_windows_are_all_window_size_plus_one_and_hold_the_unpadded_windows(
    pattern, world
):
    plain = list(make_loader(pattern, world=world, shuffle=True))
    fixed = list(make_loader(pattern, world=world, shuffle=True, fixed_shape=True))
    assert {tuple(t.shape) for batch in fixed for t in tensors_of(batch)} == {
        (ROWS, WINDOW + 1),
        (ROWS, WINDOW + 1, 50),
        (ROWS,),
    }
    added = [padding(unpadded, padded) for unpadded, padded in zip(plain, fixed, strict=True)]
    assert added[:-1] == [(0, 0)] * (len(added) - 1) and added[-1][1] > 0


def test_fixed_shape_pads_a_batch_of_lone_last_tokens_to_full_windows(tmp_path):
    """Process 0 of 2 reading 45 tokens as 2 x 2 streams of 5-token windows: its streams have
    11 tokens, process 1's last one 12, so its last batch holds each stream's last token alone."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"w{i} b c\n" for i in range(9)))  # <S> w b c </S>: 9 x 5 tokens
    options: dict[str, Any] = dict(world=(2, 0), batch_size=2, window_size=5)
    plain = list(make_loader(str(corpus), **options))
    fixed = list(make_loader(str(corpus), fixed_shape=True, **options))
    assert source_shapes(plain) == [(2, 6), (2, 6), (2, 1)]
    assert source_shapes(fixed) == [(2, 6)] * 3
    assert padding(plain[-1], fixed[-1]) == (0, 5)
