import logging

import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary


def vocab_from(tokens_file):
    return Vocabulary.from_params(
        Params({"type": "elmo_tokens_file", "tokens_file": str(tokens_file)})
    )


def test_line_i_is_index_i_plus_one(tmp_path):
    (tmp_path / "tokens.txt").write_text("<S>\n</S>\n@@UNKNOWN@@\nthe\ncat\n")
    vocab = vocab_from(tmp_path / "tokens.txt")
    indices = [vocab.get_token_index(t) for t in ["<S>", "</S>", "@@UNKNOWN@@", "the", "cat"]]
    assert indices == [1, 2, 3, 4, 5]
    assert vocab.get_vocab_size() == 6
    assert vocab.get_token_index("unseen") == 3


def test_published_unk_becomes_the_oov_token(tmp_path):
    (tmp_path / "tokens.txt").write_text("</S>\n<S>\n<UNK>\nthe\n")
    vocab = vocab_from(tmp_path / "tokens.txt")
    assert vocab.get_token_index("@@UNKNOWN@@") == 3
    assert vocab.get_token_index("whatever") == 3


def test_missing_specials_added_with_warning(tmp_path, caplog):
    (tmp_path / "tokens.txt").write_text("the\ncat\n")
    with caplog.at_level(logging.WARNING):
        vocab = vocab_from(tmp_path / "tokens.txt")
    assert vocab.get_token_index("the") == 1
    assert {vocab.get_token_index(t) for t in ["<S>", "</S>", "@@UNKNOWN@@"]} == {3, 4, 5}
    assert any("lacks" in r.getMessage() for r in caplog.records)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(ConfigurationError, match="nope.txt"):
        vocab_from(tmp_path / "nope.txt")
