"""A read of a corpus in chunks (the `elmo_corpus` and `elmo_streams` loaders) is counted as a
whole: one summary line for the first full read, warnings naming the true file:line of the first
lines with invalid UTF-8 (however the corpus is chunked, whatever the loader workers), at most
MAX_UTF8_WARNINGS per loader, and an error naming the corpus when it holds no text."""

import logging
import re

import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.data.corpus_stats import (
    MAX_UTF8_WARNINGS,
    SNIFF_LINES,
    CorpusStats,
    LinePlace,
)
from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_streams_loader import ElmoStreamsLoader

BAD_EVERY = 7  # every 7th line after the first SNIFF_LINES has an invalid byte; every 11th is blank


def write_shard(path, lines: int) -> list[int]:
    """A shard of `lines` lines (a few blank); returns the 1-based numbers of its invalid-UTF-8
    lines."""
    bad = [n for n in range(SNIFF_LINES + 1, lines + 1) if n % BAD_EVERY == 0 and n % 11]
    path.write_bytes(
        b"".join(
            b"\n" if n % 11 == 0 else b"w%d \xff x\n" % n if n in bad else b"w%d x y\n" % n
            for n in range(1, lines + 1)
        )
    )
    return bad


def loader(cls, pattern: str, **options):
    made = cls(ElmoCorpusReader(), pattern, batch_size=2, chunk_bytes=97, seed=3, **options)
    made.index_with(Vocabulary())
    return made


def named_places(caplog) -> list[str]:
    pattern = re.compile(r"invalid UTF-8 at (\S+), replaced")
    return [
        match.group(1)
        for match in (pattern.search(r.getMessage()) for r in caplog.records)
        if match is not None
    ]


def summaries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "text lines from" in r.getMessage()]


def test_a_byte_order_mark_opening_a_file_is_no_part_of_its_first_token(tmp_path):
    """As Windows editors save UTF-8: the same tokens as without the mark, whole file or ranges;
    a mark inside a line is text."""
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfthe cat\nsat \xef\xbb\xbfon\n")
    (tmp_path / "plain.txt").write_bytes(b"the cat\nsat \xef\xbb\xbfon\n")
    reader = ElmoCorpusReader()
    for name in ("bom.txt", "plain.txt"):
        path = str(tmp_path / name)
        lines = [text for _, _, text in reader.corpus_lines(path, CorpusStats())]
        assert lines == ["the cat", "sat \ufeffon"]
        ranged = [reader.line_text(b"\xef\xbb\xbfx", path, 1, CorpusStats(), start=9)]
        assert ranged == ["\ufeffx"]  # not the file's first line


@pytest.mark.parametrize("start", [0, 1, 5, 6, 40])
def test_a_place_in_a_byte_range_is_named_by_its_line_in_the_file(tmp_path, start):
    path = tmp_path / "s.txt"
    path.write_bytes(b"ab\ncd\n\nefgh\nij\n" * 4)
    data = path.read_bytes()
    first = data.index(b"\n", start - 1) + 1 if start else 0  # the first line the range reads
    line = data[:first].count(b"\n") + 2
    assert str(LinePlace(str(path), 2, start)) == f"{path}:{line}"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_the_corpus_loader_names_true_lines_and_summarizes_the_first_epoch_once(
    tmp_path, caplog, num_workers
):
    bad = write_shard(tmp_path / "a.txt", 120)
    bad_b = write_shard(tmp_path / "b.txt", 60)
    (tmp_path / "c.txt").write_bytes(b"")
    made = loader(ElmoCorpusLoader, str(tmp_path / "*.txt"), shuffle=False, num_workers=num_workers)
    assert len(made.chunks) > 10
    with caplog.at_level(logging.INFO):
        for _ in range(2):
            list(made)
    places = [f"{tmp_path / 'a.txt'}:{n}" for n in bad] + [
        f"{tmp_path / 'b.txt'}:{n}" for n in bad_b
    ]
    assert named_places(caplog) == places[:MAX_UTF8_WARNINGS]
    blank = 120 // 11 + 60 // 11
    assert summaries(caplog) == [
        f"elmo_corpus {tmp_path / '*.txt'}: {180 - blank} text lines from 3 files; skipped 1 "
        f"empty files, {blank} blank lines, 0 heading lines; {len(places)} lines had invalid "
        "UTF-8 (replaced with U+FFFD)"
    ]


def test_the_streams_loader_counts_its_first_read_of_the_corpus(tmp_path, caplog):
    bad = write_shard(tmp_path / "a.txt", 150)
    made = loader(ElmoStreamsLoader, str(tmp_path / "a.txt"))
    with caplog.at_level(logging.INFO):
        list(made)
        list(made)
    assert named_places(caplog) == [f"{tmp_path / 'a.txt'}:{n}" for n in bad][:MAX_UTF8_WARNINGS]
    assert len(summaries(caplog)) == 1 and f"{len(bad)} lines had invalid" in summaries(caplog)[0]


@pytest.mark.parametrize("cls", [ElmoCorpusLoader, ElmoStreamsLoader])
def test_a_corpus_without_text_is_an_error_naming_it(tmp_path, cls):
    (tmp_path / "blank.txt").write_text("\n  \n\n" * 50)
    (tmp_path / "empty.txt").write_text("")
    made = loader(cls, str(tmp_path / "*.txt"))
    with pytest.raises(ConfigurationError, match=r"no tokens at all in '.*\*\.txt'.*150 blank"):
        list(made)
    with pytest.raises(ConfigurationError, match="no tokens at all"):
        list(made.iter_instances())
