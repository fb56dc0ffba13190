"""The `elmo_streams` loader's layout: every token of every line once per epoch, in line order
within its stream, backward windows reading the same stream reversed, the same number of
batches in every distributed process, and a resume that yields exactly the remaining batches."""
from pathlib import Path
from typing import List, Tuple

import pytest
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_streams_loader import ElmoStreamsLoader
from tests.data.test_elmo_corpus_loader import write_corpus

WINDOW = 6
ROWS = 3


def make_loader(pattern: str, world: Tuple[int, int] = (1, 0), **kwargs) -> ElmoStreamsLoader:
    options = dict(batch_size=ROWS, window_size=WINDOW, shuffle=False, chunk_bytes=300, seed=7)
    options.update(kwargs)
    loader = ElmoStreamsLoader(ElmoCorpusReader(max_sequence_length=5), pattern, **options)
    loader.world_size, loader.rank = world  # as a distributed process sees it
    loader.index_with(Vocabulary.from_instances(loader.iter_instances()))
    return loader


def file_order_tokens(pattern: str) -> List[str]:
    reader = ElmoCorpusReader(max_sequence_length=5)
    return [token.text for instance in reader.read(pattern) for token in instance["source"].tokens]


def rows(loader: ElmoStreamsLoader, batch, field: str) -> List[List[str]]:
    vocab = loader._vocab
    return [[vocab.get_token_from_index(i, "tokens") for i in row if i] for row in batch[field]["tokens"]["tokens"].tolist()]


def joined_streams(loader: ElmoStreamsLoader, batches, field: str) -> List[List[str]]:
    """Each row's windows joined back, the one-token overlap of consecutive windows dropped."""
    streams: List[List[str]] = [[] for _ in range(loader.batch_size)]
    for k, batch in enumerate(batches):
        for stream, window in zip(streams, rows(loader, batch, field)):
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
    forward, backward = joined_streams(loader, batches, "source"), joined_streams(loader, batches, "backward_source")
    assert backward == [stream[::-1] for stream in forward]
    for batch in batches:  # the same number of tokens (same padding) in both directions
        assert rows(loader, batch, "source") and [len(r) for r in rows(loader, batch, "source")] == [
            len(r) for r in rows(loader, batch, "backward_source")
        ]


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
    for a, b in zip(words, words[1:]):  # within a line, token t is followed by t + 1
        (sa, la, ta), (sb, lb, tb) = a[1:].split("_"), b[1:].split("_")
        if (sa, la) == (sb, lb):
            assert int(tb) == int(ta) + 1


def test_processes_read_disjoint_streams_with_the_same_number_of_batches(pattern):
    loaders = [make_loader(pattern, world=(2, rank)) for rank in range(2)]
    epochs = [list(loader) for loader in loaders]
    assert len(epochs[0]) == len(epochs[1])
    streams = [s for loader, epoch in zip(loaders, epochs) for s in joined_streams(loader, epoch, "source")]
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
    assert [b for b in resumed] == [{}] * len(list(make_loader(pattern, shuffle=True)))  # epoch 0 replayed empty
    again = list(resumed)
    assert again[:4] == [{}] * 4
    for mine, theirs in zip(again[4:], rest, strict=True):
        assert torch.equal(mine["source"]["tokens"]["tokens"], theirs["source"]["tokens"]["tokens"])
        assert torch.equal(mine["backward_source"]["elmo"]["elmo_tokens"], theirs["backward_source"]["elmo"]["elmo_tokens"])


def test_too_few_tokens_for_the_streams_is_an_error(tmp_path):
    (tmp_path / "tiny.txt").write_text("a b\n")
    loader = make_loader(str(tmp_path / "tiny.txt"), batch_size=4)
    with pytest.raises(ConfigurationError, match="too few for 4 streams"):
        list(loader)
