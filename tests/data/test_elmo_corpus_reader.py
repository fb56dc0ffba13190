import bz2
import gzip
import logging
import lzma
import random

import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper

from elmo_plugin.data.corpus_stats import SNIFF_LINES
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from tests.helpers import first_item_before_end_of_file


def read_texts(reader, path):
    return [
        [token.text for token in instance["source"].tokens] for instance in reader.read(str(path))
    ]


def test_lines_become_bos_tokens_eos(tmp_path):
    (tmp_path / "a.txt").write_text("the cat sat\n\nthe dog\n")
    assert read_texts(ElmoCorpusReader(), tmp_path / "a.txt") == [
        ["<S>", "the", "cat", "sat", "</S>"],
        ["<S>", "the", "dog", "</S>"],
    ]


def test_long_line_split_into_consecutive_windows_not_dropped(tmp_path):
    words = [f"w{i}" for i in range(23)]
    (tmp_path / "a.txt").write_text(" ".join(words) + "\n")
    windows = read_texts(ElmoCorpusReader(max_sequence_length=10), tmp_path / "a.txt")
    assert [len(window) - 2 for window in windows] == [10, 10, 3]
    assert [token for window in windows for token in window[1:-1]] == words


def test_glob_of_shards_read_in_order_with_empty_shard_counted(tmp_path, caplog):
    (tmp_path / "s0.txt").write_text("a b\n")
    (tmp_path / "s1.txt").write_text("")
    (tmp_path / "s2.txt").write_text("c d\n= Heading =\n\n = = Sub heading = = \n")
    with caplog.at_level(logging.INFO):
        texts = read_texts(ElmoCorpusReader(skip_headings=True), tmp_path / "s*.txt")
    assert texts == [["<S>", "a", "b", "</S>"], ["<S>", "c", "d", "</S>"]]
    summary = [
        r.getMessage() for r in caplog.records if "text lines from 3 files" in r.getMessage()
    ]
    assert len(summary) == 1
    assert "1 empty files, 1 blank lines, 2 heading lines" in summary[0]


def test_headings_kept_unless_asked(tmp_path):
    (tmp_path / "a.txt").write_text("= Title =\n")
    assert read_texts(ElmoCorpusReader(), tmp_path / "a.txt") == [
        ["<S>", "=", "Title", "=", "</S>"]
    ]


def test_pattern_matching_nothing_names_the_pattern(tmp_path):
    pattern = str(tmp_path / "missing_*.txt")
    with pytest.raises(ConfigurationError, match="missing_"):
        read_texts(ElmoCorpusReader(), pattern)


def test_corpus_without_tokens_names_the_path(tmp_path):
    (tmp_path / "blank.txt").write_text("\n   \n\n")
    with pytest.raises(ConfigurationError, match="no tokens at all in .*blank.txt"):
        read_texts(ElmoCorpusReader(), tmp_path / "blank.txt")


def test_invalid_utf8_replaced_with_warning_naming_file_and_line(tmp_path, caplog):
    (tmp_path / "bad.txt").write_bytes(b"good line\nbad \xff\xfe byte\n")
    with caplog.at_level(logging.WARNING):
        texts = read_texts(ElmoCorpusReader(), tmp_path / "bad.txt")
    assert texts[1] == ["<S>", "bad", "\ufffd\ufffd", "byte", "</S>"]
    assert any("bad.txt:2" in record.getMessage() for record in caplog.records)


def test_text_to_instance_with_indexers_gives_targets_and_char_ids(tmp_path):
    from allennlp.data import Batch, Vocabulary

    reader = ElmoCorpusReader()
    instance = reader.text_to_instance("hello world")
    reader.apply_token_indexers(instance)
    vocab = Vocabulary.from_instances([instance])
    batch = Batch([instance])
    batch.index_instances(vocab)
    tensors = batch.as_tensor_dict()["source"]
    words = ["<S>", "hello", "world", "</S>"]
    assert tensors["tokens"]["tokens"].tolist() == [[vocab.get_token_index(word) for word in words]]
    mapper = ELMoCharacterMapper()  # allennlp's ids, shifted by one so that 0 is padding
    assert tensors["elmo"]["elmo_tokens"].tolist() == [
        [mapper.convert_word_to_char_ids(word) for word in words]
    ]


def test_read_is_lazy(tmp_path):
    """The first line's instance comes out while the shard is still being written (after the
    reader's look at the first SNIFF_LINES lines, which tells text from binary)."""
    head = "the cat sat\n" + "".join(f"line {i}\n" for i in range(SNIFF_LINES))
    instance = first_item_before_end_of_file(ElmoCorpusReader().read, tmp_path / "pipe.txt", head)
    assert [token.text for token in instance["source"].tokens] == [
        "<S>",
        "the",
        "cat",
        "sat",
        "</S>",
    ]


def test_invalid_utf8_lines_are_counted_and_the_first_few_named(tmp_path, caplog):
    """Every bad line is counted in the summary line; only the first MAX_UTF8_WARNINGS get a
    warning of their own (a corpus full of them must not flood the log)."""
    from elmo_plugin.data.corpus_stats import MAX_UTF8_WARNINGS

    bad_lines = MAX_UTF8_WARNINGS + 3
    good = b"".join(
        b"fine %d\n" % i for i in range(SNIFF_LINES)
    )  # mostly text: not refused as binary
    (tmp_path / "bad.txt").write_bytes(
        good + b"".join(b"word \xff %d\n" % i for i in range(bad_lines))
    )
    with caplog.at_level(logging.INFO):
        assert len(read_texts(ElmoCorpusReader(), tmp_path / "bad.txt")) == SNIFF_LINES + bad_lines
    named = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "invalid UTF-8 at" in r.getMessage()
    ]
    assert len(named) == MAX_UTF8_WARNINGS
    assert any(f"{bad_lines} lines had invalid UTF-8" in r.getMessage() for r in caplog.records)


def test_gz_bz2_and_xz_shards_are_read_as_plain_text(tmp_path):
    (tmp_path / "s0.txt.gz").write_bytes(gzip.compress(b"a b\n\nc\n"))
    (tmp_path / "s1.txt.bz2").write_bytes(bz2.compress(b"d\n"))
    (tmp_path / "s2.txt.xz").write_bytes(lzma.compress("\u00e9 f\n".encode()))
    (tmp_path / "s3.txt").write_text("g\n")
    assert read_texts(ElmoCorpusReader(), tmp_path / "s*") == [
        ["<S>", "a", "b", "</S>"],
        ["<S>", "c", "</S>"],
        ["<S>", "d", "</S>"],
        ["<S>", "\u00e9", "f", "</S>"],
        ["<S>", "g", "</S>"],
    ]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("random.bin", bytes(range(128, 256)) * 40, "is not text"),
        ("compressed.txt", gzip.compress(b"a b\n" * 100, mtime=0), "is not text"),
        ("utf16.txt", "a b c\n".encode("utf-16-le") * 5, "is not text"),
        ("broken.gz", b"not gzip at all\n", "cannot read"),
    ],
)
def test_a_file_that_is_not_text_is_an_error_naming_it_before_any_line_is_read(
    tmp_path, name, content, message
):
    (tmp_path / name).write_bytes(content)
    lines = ElmoCorpusReader().read(str(tmp_path / name))
    with pytest.raises(
        ConfigurationError, match=f"{tmp_path / name}.*{message}|{message}.*{tmp_path / name}"
    ):
        next(iter(lines))


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_a_shard_whose_compressed_data_is_damaged_midway_is_an_error_naming_it(
    tmp_path, suffix, compress
):
    rows = random.Random(0)
    text = "".join(f"{rows.random()} {rows.random()} {rows.random()}\n" for _ in range(3000))
    damaged = bytearray(compress(text.encode("utf-8")))
    middle = len(damaged) // 2
    damaged[middle : middle + 16] = b"\xff" * 16
    path = tmp_path / f"shard{suffix}"
    path.write_bytes(damaged)
    with pytest.raises(ConfigurationError, match=f"^elmo_corpus: cannot read {path}: "):
        read_texts(ElmoCorpusReader(), path)


def test_stray_nul_and_invalid_bytes_in_text_are_replaced_not_refused(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"a\x00b c\nd \xff e\nf g\n")
    assert read_texts(ElmoCorpusReader(), tmp_path / "a.txt") == [
        ["<S>", "a\ufffdb", "c", "</S>"],
        ["<S>", "d", "\ufffd", "e", "</S>"],
        ["<S>", "f", "g", "</S>"],
    ]
