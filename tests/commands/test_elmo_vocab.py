"""`allennlp elmo-vocab` through the real CLI, from a working directory outside the repo."""
import subprocess

import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.commands.elmo_vocab import count_tokens, vocab_tokens, write_elmo_vocab
from tests.helpers import ALLENNLP, run_allennlp


def failing_allennlp(args, cwd) -> str:
    """Runs the CLI expecting an error; returns its stderr."""
    result = subprocess.run([ALLENNLP, *args, "--include-package", "elmo_plugin"], cwd=cwd, capture_output=True, text=True)
    assert result.returncode != 0, result.stdout
    return result.stderr


@pytest.fixture
def corpus(plugin_cwd):
    (plugin_cwd / "first.txt").write_text("b a b\n\nc a <S> b d\n= Heading =\n", encoding="utf-8")
    (plugin_cwd / "shards").mkdir()
    (plugin_cwd / "shards" / "0.txt").write_text("d e c\n", encoding="utf-8")
    (plugin_cwd / "shards" / "1.txt").write_text("", encoding="utf-8")  # empty shard: skipped
    return plugin_cwd


def test_specials_first_then_by_count_ties_by_first_appearance(corpus):
    (corpus / "vocab").mkdir()
    out = corpus / "vocab" / "tokens.txt"
    write_elmo_vocab([str(corpus / "first.txt"), str(corpus / "shards" / "*.txt")], str(out))
    # counts: b 3, a 2, c 2, d 2, = 2, Heading 1, e 1; ties in order of first appearance.
    assert out.read_text(encoding="utf-8").splitlines() == [
        "<S>", "</S>", "@@UNKNOWN@@", "b", "a", "c", "d", "=", "Heading", "e"
    ]
    vocab = Vocabulary.from_params(Params({"type": "elmo_tokens_file", "tokens_file": str(out)}))
    assert [vocab.get_token_index(t) for t in ["<S>", "</S>", "@@UNKNOWN@@", "b", "e"]] == [1, 2, 3, 4, 10]
    assert vocab.get_token_index("never-seen") == 3
    assert vocab.get_vocab_size() == 11


def test_cli_min_count_max_size_and_heading_skipping(corpus):
    """Through `allennlp elmo-vocab` (the ordering test above runs the same function in-process)."""
    out = corpus / "tokens.txt"
    run_allennlp(["elmo-vocab", "first.txt", "shards/*.txt", str(out), "--min-count", "2", "--max-size", "6",
                  "--skip-headings"], cwd=corpus)
    assert out.read_text(encoding="utf-8").splitlines() == ["<S>", "</S>", "@@UNKNOWN@@", "b", "a", "c"]


def test_a_file_matched_by_two_patterns_counts_once(corpus):
    counts = count_tokens([str(corpus / "first.txt"), str(corpus / "*.txt")])
    assert counts["b"] == 3 and list(counts)[:3] == ["b", "a", "c"]
    assert vocab_tokens(counts, min_count=3) == ["<S>", "</S>", "@@UNKNOWN@@", "b"]
    with pytest.raises(ConfigurationError, match="max-size"):
        vocab_tokens(counts, max_size=2)


def test_bad_input_errors_name_the_pattern(corpus):
    assert "no file matches 'missing/*.txt'" in failing_allennlp(
        ["elmo-vocab", "first.txt", "missing/*.txt", "out.txt"], corpus
    )
    assert not (corpus / "out.txt").exists()
    (corpus / "blank.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="no tokens at all in '.*blank.txt', '.*1.txt'"):
        count_tokens([str(corpus / "blank.txt"), str(corpus / "shards" / "1.txt")])
