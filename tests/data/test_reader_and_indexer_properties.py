"""Property-based (hypothesis): the `elmo_corpus` reader's windows and the `elmo_char_ids`
indexer on arbitrary Unicode."""

import tempfile
from pathlib import Path

from allennlp.common.checks import ConfigurationError
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer
from hypothesis import given, settings
from hypothesis import strategies as st

from elmo_plugin.data.corpus_stats import checked_text
from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_vocab_file import BOS, EOS

# Any Unicode scalar value (no surrogates: they cannot be written as UTF-8).
UNICODE = st.characters(blacklist_categories=["Cs"])
TOKEN = st.text(UNICODE, min_size=1, max_size=60).filter(lambda text: text.split() == [text])
LINE = st.lists(TOKEN, max_size=30)


def read_as_text(lines: list[list[str]]) -> bool:
    """Whether the reader takes these lines for text (its own check): a file whose first lines
    are mostly a quarter or more NUL bytes is refused as binary (test_elmo_corpus_reader.py),
    e.g. the one line "\x00"."""
    raw = [(" ".join(line) + "\n").encode("utf-8") for line in lines]
    try:
        list(checked_text("corpus.txt", iter(raw), "elmo_corpus"))
    except ConfigurationError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(LINE, min_size=1, max_size=6).filter(any).filter(read_as_text),
    max_sequence_length=st.integers(1, 12),
)
def test_windows_hold_every_token_once_in_order_within_the_limit_between_boundaries(
    lines, max_sequence_length
):
    """(A corpus without any token is an error, tested in test_elmo_corpus_reader.py.)"""
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.txt"
        corpus.write_text("".join(" ".join(line) + "\n" for line in lines), encoding="utf-8")
        instances = list(
            ElmoCorpusReader(max_sequence_length=max_sequence_length).read(str(corpus))
        )
    texts = [[token.text for token in instance["source"].tokens] for instance in instances]
    assert all(text[0] == BOS and text[-1] == EOS for text in texts)
    windows = [text[1:-1] for text in texts]
    assert all(1 <= len(window) <= max_sequence_length for window in windows)
    nul_replaced = [token.replace("\x00", "\ufffd") for line in lines for token in line]
    assert [token for window in windows for token in window] == nul_replaced
    # windows never span two lines: each line is cut into ceil(len / max) windows
    assert len(windows) == sum(-(-len(line) // max_sequence_length) for line in lines)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.one_of(TOKEN, st.sampled_from([BOS, EOS, "x" * 70])), max_size=20))
def test_indexer_ids_equal_allennlps_elmo_characters_on_any_unicode(tokens):
    ours = ElmoCharIdsIndexer(
        cache_size=5
    )  # a small cache: cached and uncached tokens both checked
    theirs = ELMoTokenCharactersIndexer()
    vocab = Vocabulary()
    as_tokens = [Token(text) for text in tokens + tokens]
    ours_ids = ours.tokens_to_indices(as_tokens, vocab)["elmo_tokens"]
    assert ours_ids.shape == (len(as_tokens), 50)
    assert ours_ids.tolist() == theirs.tokens_to_indices(as_tokens, vocab)["elmo_tokens"]
