"""One reader, one rule for ELMo vocabulary files: the `elmo_tokens_file` vocabulary and the
softmax import map every line to the same row."""

import logging

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.data.elmo_vocab_file import (
    published_tokens,
    read_elmo_vocab_file,
    write_elmo_vocab_file,
)
from elmo_plugin.elmo_files.layout import write_hdf5
from elmo_plugin.elmo_files.softmax import import_softmax


def vocab_from(tokens_file) -> Vocabulary:
    return Vocabulary.from_params(
        Params({"type": "elmo_tokens_file", "tokens_file": str(tokens_file)})
    )


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_a_blank_or_whitespace_line_inside_is_an_error_naming_file_and_line(tmp_path, blank):
    path = tmp_path / "vocab.txt"
    path.write_text(f"<S>\n</S>\n{blank}\nthe\n")
    with pytest.raises(ConfigurationError, match=r"vocab.txt:3: blank line"):
        read_elmo_vocab_file(str(path))
    with pytest.raises(ConfigurationError, match=r"vocab.txt:3: blank line"):
        vocab_from(path)


def test_a_line_that_is_not_utf8_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes("<S>\n</S>\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(
        ConfigurationError, match=r"vocab.txt:3: not UTF-8 \(invalid .* at byte 3\)"
    ):
        read_elmo_vocab_file(str(path))


@pytest.mark.parametrize("text", ["", "<S>\n</S>\n<UNK>\n"])
def test_a_tokens_file_without_a_word_is_an_error_naming_it(tmp_path, text):
    """Every word would be unknown: a model whose perplexity looks excellent."""
    path = tmp_path / "vocab.txt"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=r"vocab.txt holds no token but <S>, </S> and"):
        vocab_from(path)


def test_a_token_on_two_lines_is_an_error_naming_both(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<S>\n</S>\nthe\ncat\nthe\n")
    with pytest.raises(ConfigurationError, match=r"vocab.txt:5: 'the' again \(first on line 3\)"):
        vocab_from(path)


def test_windows_line_ends_and_byte_order_mark_read_as_the_same_tokens(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"\xef\xbb\xbf<S>\r\n</S>\r\n<UNK>\r\nthe\r\n")
    assert read_elmo_vocab_file(str(path)) == ["<S>", "</S>", "@@UNKNOWN@@", "the"]


def test_blank_lines_at_the_end_are_ignored(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<S>\n</S>\n<UNK>\nthe\n\n  \n")
    assert read_elmo_vocab_file(str(path)) == ["<S>", "</S>", "@@UNKNOWN@@", "the"]


def test_vocabulary_and_softmax_import_put_each_line_on_the_same_row(tmp_path):
    """Line i of the file is vocabulary index i + 1 and softmax row i, in both readers, also
    when the file lacks specials (appended after the file's lines)."""
    path = tmp_path / "vocab.txt"
    path.write_text("the\ncat\n<UNK>\nsat\n")
    vocab = vocab_from(path)
    rows = 4
    weight_in_file = torch.arange(rows, dtype=torch.float32).unsqueeze(1).repeat(1, 2)
    write_hdf5(
        str(tmp_path / "softmax.hdf5"),
        {"weight": weight_in_file.numpy(), "bias": weight_in_file[:, 0].numpy()},
    )
    weight, bias = (
        torch.full((vocab.get_vocab_size(), 2), -1.0),
        torch.full((vocab.get_vocab_size(),), -1.0),
    )
    import_softmax(
        weight,
        bias,
        vocab.get_token_to_index_vocabulary(),
        str(tmp_path / "softmax.hdf5"),
        str(path),
    )
    for line, token in enumerate(["the", "cat", "@@UNKNOWN@@", "sat"]):
        assert vocab.get_token_index(token) == line + 1
        assert bias[line] == line and torch.equal(weight[line], weight_in_file[line])


def test_missing_specials_are_appended_with_a_warning(tmp_path, caplog):
    path = tmp_path / "vocab.txt"
    path.write_text("the\ncat\n")
    with caplog.at_level(logging.WARNING):
        vocab = vocab_from(path)
    indices = [vocab.get_token_index(t) for t in ["the", "cat", "<S>", "</S>", "@@UNKNOWN@@"]]
    assert indices == [1, 2, 3, 4, 5]
    assert any("lacks" in record.getMessage() for record in caplog.records)


def test_the_writer_is_atomic_and_round_trips(tmp_path):
    path = tmp_path / "tokens.txt"
    write_elmo_vocab_file(str(path), ["<S>", "</S>", "@@UNKNOWN@@", "é"])
    assert read_elmo_vocab_file(str(path)) == ["<S>", "</S>", "@@UNKNOWN@@", "é"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokens.txt"]  # no partial file left


def test_a_token_allennlp_loaded_as_a_newline_is_written_back_as_its_corpus_token(tmp_path):
    """A corpus token @@NEWLINE@@ is "\n" in a loaded archive's vocabulary (allennlp's files):
    one line, the corpus token, not two blank lines shifting every later row."""
    vocabulary = Vocabulary()
    vocabulary.add_tokens_to_namespace(["cat", "@@NEWLINE@@", "sat"])
    vocabulary.save_to_files(str(tmp_path / "vocabulary"))
    loaded = Vocabulary.from_files(str(tmp_path / "vocabulary"))
    tokens = list(loaded.get_token_to_index_vocabulary().keys())[2:]  # after padding and OOV
    assert tokens == ["cat", "\n", "sat"]
    write_elmo_vocab_file(str(tmp_path / "vocab.txt"), tokens)
    assert read_elmo_vocab_file(str(tmp_path / "vocab.txt")) == ["cat", "@@NEWLINE@@", "sat"]


def test_files_for_others_name_the_unknown_word_as_published_vocabularies_do():
    """bilm-tf's training (load_vocab, validate_file=True) refuses a vocabulary without `<UNK>`;
    a corpus token `<UNK>` of its own keeps allennlp's name for the unknown word."""
    assert published_tokens(["<S>", "</S>", "@@UNKNOWN@@", "a"]) == ["<S>", "</S>", "<UNK>", "a"]
    both = ["@@UNKNOWN@@", "<UNK>", "a"]
    assert published_tokens(both) == both
