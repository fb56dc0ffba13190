import numpy as np
import torch
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer, words_to_char_ids
from tests.helpers import REPO_ROOT

MIXED_CORPUS = [
    "plain ASCII words , and punctuation !",
    "Ünïcödé naïve café façade Straße",
    "日本語 の テキスト 中文 한국어 Ελληνικά русский עברית العربية",
    "emoji 🙂 👩‍👩‍👧 combining e\u0301 zero\u200bwidth",
    "x" * 60 + " " + "é" * 30 + " " + "🙂" * 20 + " " + "a" * 48 + " " + "b" * 49,
    "<S> </S> @@UNKNOWN@@ @@PADDING@@",
]


def same_ids(ours, reference) -> bool:
    """Our (tokens, 50) int16 array equals allennlp's list of 50-id lists."""
    return (
        ours.dtype == np.int16 and ours.shape == (len(reference), 50) and ours.tolist() == reference
    )


def test_ids_equal_allennlp_elmo_characters_on_mixed_corpus():
    for cache_size in (1_000_000, 7, 0):  # all cached, a full cache, no cache
        ours, reference, vocab = (
            ElmoCharIdsIndexer(cache_size),
            ELMoTokenCharactersIndexer(),
            Vocabulary(),
        )
        for line in MIXED_CORPUS * 2:  # second pass is served from the cache
            tokens = [Token(text) for text in line.split()]
            ids = ours.tokens_to_indices(tokens, vocab)
            assert list(ids) == ["elmo_tokens"]
            assert same_ids(
                ids["elmo_tokens"], reference.tokens_to_indices(tokens, vocab)["elmo_tokens"]
            )


def test_bulk_ids_equal_the_mappers_word_by_word_for_specials_empty_long_and_broken_text():
    mapper = ELMoCharacterMapper()
    words = [
        "<S>",
        "</S>",
        "",
        "a",
        "x" * 200,
        "é" * 30,
        "🙂" * 13,
        "a" * 47 + "é",
        "\ud800",
        "<S>x",
        *MIXED_CORPUS[2].split(),
    ]
    assert same_ids(
        words_to_char_ids(words), [mapper.convert_word_to_char_ids(word) for word in words]
    )
    assert same_ids(words_to_char_ids([]), [])
    ids = words_to_char_ids(["x" * 200])[0]
    assert ids[0] == 259 and ids[49] == 260  # begin-of-word, end-of-word after 48 bytes (+1 shift)


def test_the_docs_name_the_bytes_a_token_keeps():
    """48 bytes kept (ELMo's 50 characters less the begin- and end-of-word marks), as the users'
    pages say where they say that long tokens are cut."""
    assert ELMoCharacterMapper.max_word_length - 2 == 48
    for page in ("embedding.md", "security.md"):
        text = " ".join((REPO_ROOT / "docs" / page).read_text(encoding="utf-8").split())
        assert "tokens longer than 48 bytes keep their first 48 (50 characters" in text.lower()


def test_padded_tensor_matches_reference_padded_cut_and_empty():
    ours, reference, vocab = ElmoCharIdsIndexer(), ELMoTokenCharactersIndexer(), Vocabulary()
    tokens = [Token(text) for text in ["a", "bb", "x" * 70, "日本語"]]
    for ours_ids, reference_ids in [
        (ours.tokens_to_indices(tokens, vocab), reference.tokens_to_indices(tokens, vocab)),
        (ours.get_empty_token_list(), reference.get_empty_token_list()),
    ]:
        for length in (1, 2, 4, 7):  # (at length 0, allennlp's is shaped (0,), ours (0, 50))
            lengths = {"elmo_tokens": length}
            ours_tensor = ours.as_padded_tensor_dict(ours_ids, lengths)["elmo_tokens"]
            reference_tensor = reference.as_padded_tensor_dict(reference_ids, lengths)[
                "elmo_tokens"
            ]
            assert (
                ours_tensor.shape == (length, 50)
                and ours_tensor.dtype == reference_tensor.dtype == torch.long
            )
            assert torch.equal(ours_tensor, reference_tensor)


def test_cache_is_bounded_and_not_pickled():
    indexer = ElmoCharIdsIndexer(cache_size=2)
    for text in ["a", "b", "c", "d"]:
        indexer.char_ids_of([text])
    assert len(indexer._rows) == 2 and len(indexer._table) == 2
    assert indexer.char_ids_of(["d", "a"]).tolist() == words_to_char_ids(["d", "a"]).tolist()
    assert indexer.char_ids("d") == words_to_char_ids(["d"])[0].tolist()
    state = indexer.__getstate__()
    assert state["_rows"] == {} and len(state["_table"]) == 0
