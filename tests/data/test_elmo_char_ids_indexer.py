import torch
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer

MIXED_CORPUS = [
    "plain ASCII words , and punctuation !",
    "Ünïcödé naïve café façade Straße",
    "日本語 の テキスト 中文 한국어 Ελληνικά русский עברית العربية",
    "emoji 🙂 👩‍👩‍👧 combining e\u0301 zero\u200bwidth",
    "x" * 60 + " " + "é" * 30 + " " + "🙂" * 20 + " " + "a" * 48 + " " + "b" * 49,
    "<S> </S> @@UNKNOWN@@ @@PADDING@@",
]


def test_ids_equal_allennlp_elmo_characters_on_mixed_corpus():
    ours, reference, vocab = ElmoCharIdsIndexer(), ELMoTokenCharactersIndexer(), Vocabulary()
    for line in MIXED_CORPUS * 2:  # second pass is served from the cache
        tokens = [Token(text) for text in line.split()]
        assert ours.tokens_to_indices(tokens, vocab) == reference.tokens_to_indices(tokens, vocab)


def test_long_token_truncated_to_50_ids_like_the_mapper():
    ids = ElmoCharIdsIndexer().char_ids("x" * 200)
    assert len(ids) == 50
    assert ids[0] == 259 and ids[49] == 260  # begin-of-word, end-of-word after 48 bytes (+1 shift)


def test_padded_tensor_matches_reference():
    ours, reference, vocab = ElmoCharIdsIndexer(), ELMoTokenCharactersIndexer(), Vocabulary()
    tokens = [Token(text) for text in "a bb ccc".split()]
    lengths = {"elmo_tokens": 5}
    ours_tensor = ours.as_padded_tensor_dict(ours.tokens_to_indices(tokens, vocab), lengths)["elmo_tokens"]
    reference_tensor = reference.as_padded_tensor_dict(reference.tokens_to_indices(tokens, vocab), lengths)["elmo_tokens"]
    assert ours_tensor.shape == (5, 50)
    assert torch.equal(ours_tensor, reference_tensor)


def test_cache_is_bounded_and_not_pickled():
    indexer = ElmoCharIdsIndexer(cache_size=2)
    for text in ["a", "b", "c", "d"]:
        indexer.char_ids(text)
    assert len(indexer._cache) == 2
    assert indexer.__getstate__()["_cache"] == {}
