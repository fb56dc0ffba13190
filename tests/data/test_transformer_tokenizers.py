"""allennlp's pretrained-transformer tokenizers, indexers and embedders build on the pinned
`transformers` once elmo_plugin is imported (data/transformer_tokenizers.py)."""

import pytest
import torch
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import PretrainedTransformerMismatchedIndexer
from allennlp.data.tokenizers import PretrainedTransformerTokenizer
from allennlp.modules.token_embedders import PretrainedTransformerMismatchedEmbedder
from transformers import BertModel

from elmo_plugin.data.transformer_tokenizers import ALLENNLP_GET_TOKENIZER
from tests.helpers import save_tiny_bert


@pytest.fixture
def tiny_bert(tmp_path):
    """A saved 2-layer BERT of width 8, in a folder of its own (so in no tokenizer cache yet)."""
    return save_tiny_bert("the cat sat on the mat .\na dog ran to the cat .\n" * 20, tmp_path, 8)


def test_allennlps_own_loader_refuses_the_pinned_transformers(tiny_bert):
    with pytest.raises(AttributeError, match="add_special_tokens conflicts"):
        ALLENNLP_GET_TOKENIZER(tiny_bert, add_special_tokens=False)


def test_with_and_without_special_tokens_from_one_cached_tokenizer(tiny_bert):
    with_them = PretrainedTransformerTokenizer(tiny_bert)
    without = PretrainedTransformerTokenizer(tiny_bert, add_special_tokens=False)
    assert with_them.tokenizer is without.tokenizer
    assert [t.text for t in with_them.tokenize("the cat")] == ["[CLS]", "the", "cat", "[SEP]"]
    assert [t.text for t in without.tokenize("the cat")] == ["the", "cat"]


def test_allennlps_mismatched_indexer_and_embedder_build_and_embed_each_word(tiny_bert):
    indexer = PretrainedTransformerMismatchedIndexer(tiny_bert)
    words = [Token(w) for w in "the cate sat".split()]  # "cate": more than one wordpiece
    indexed = indexer.tokens_to_indices(words, Vocabulary())
    tensors = {
        key: tensor.unsqueeze(0)
        for key, tensor in indexer.as_padded_tensor_dict(
            indexed, indexer.get_padding_lengths(indexed)
        ).items()
    }
    embedder = PretrainedTransformerMismatchedEmbedder(tiny_bert).eval()
    got = embedder(**tensors)
    assert got.shape == (1, 3, 8)
    pieces = (
        BertModel.from_pretrained(tiny_bert)
        .eval()(input_ids=tensors["token_ids"], attention_mask=tensors["wordpiece_mask"])
        .last_hidden_state[0]
    )
    for word, (start, end) in enumerate(indexed["offsets"]):  # each word: its wordpieces' mean
        torch.testing.assert_close(got[0, word], pieces[start : end + 1].mean(0))
    assert any(end > start for start, end in indexed["offsets"])
