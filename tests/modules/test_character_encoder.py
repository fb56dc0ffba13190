"""modules/character_encoder: both of our character encoders, and allennlp-models'
`character_encoding`, give a token's ids, the sentence boundaries, their width and their
architecture through one interface, equal to what each computed on its own before."""

import copy

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.data.elmo_manylangs_indexer import (
    DEFAULT_NAMESPACE,
    boundary_ids,
    chars_namespace,
    record_dictionaries,
    token_ids,
    words_namespace,
)
from elmo_plugin.modules.bilm_encoder import BiLmEncoder, current_architecture
from elmo_plugin.modules.character_encoder import CharacterEncoder, character_encoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.elmo_manylangs_cnn import ElmoManyLangsCnn

CHARS = {name: i for i, name in enumerate(["<oov>", "<pad>", "<bow>", "<eow>", "<bos>", "<eos>"])}
CHARS.update({"a": 6, "b": 7, "é": 8})
WORDS = {"<oov>": 0, "<pad>": 1, "<bos>": 2, "<eos>": 3, "ab": 4}
MAX_CHARS = 6
TEXTS = ["ab", "ba", "é", "abababab", "zz", "<bos>"]
CHARACTER_ENCODING = {
    "type": "character_encoding",
    "embedding": {"embedding_dim": 4, "num_embeddings": 262},
    "encoder": {"type": "cnn", "embedding_dim": 4, "num_filters": 3, "ngram_filter_sizes": [1, 2]},
}


def elmo_char_cnn() -> ElmoCharCnn:
    torch.manual_seed(0)
    return ElmoCharCnn(filters=[(1, 4), (2, 4)], num_highway=1, projection_dim=5).eval()


def manylangs_cnn() -> ElmoManyLangsCnn:
    """Its sizes and boundaries from the dictionaries that a vocabulary records."""
    torch.manual_seed(0)
    vocab = Vocabulary()
    record_dictionaries(vocab, DEFAULT_NAMESPACE, CHARS, WORDS, "test")
    return ElmoManyLangsCnn(
        char_dim=3,
        filters=[(1, 2), (2, 2)],
        num_highway=1,
        projection_dim=4,
        word_dim=2,
        max_characters_per_token=MAX_CHARS,
        vocab=vocab,
    ).eval()


def rebuilt(cnn: CharacterEncoder) -> TokenEmbedder:
    """A token embedder built from the encoder's architecture alone, with its weights."""
    new = TokenEmbedder.from_params(Params(copy.deepcopy(cnn.architecture)))
    new.load_state_dict(cnn.state_dict())  # type: ignore[attr-defined]
    return new.eval()


def test_both_encoders_are_character_encoders_and_give_their_width():
    for cnn, width in ((elmo_char_cnn(), 5), (manylangs_cnn(), 4)):
        assert isinstance(cnn, CharacterEncoder) and character_encoder(cnn) is cnn
        assert cnn.get_output_dim() == width


def test_elmo_char_cnn_gives_allennlps_character_ids_and_boundaries():
    cnn, mapper = elmo_char_cnn(), ELMoCharacterMapper()
    for text in TEXTS:
        assert cnn.token_ids(text) == mapper.convert_word_to_char_ids(text)
    bos = [i + 1 for i in ELMoCharacterMapper.beginning_of_sentence_characters]
    eos = [i + 1 for i in ELMoCharacterMapper.end_of_sentence_characters]
    assert cnn.boundary_ids() == (bos, eos)
    assert cnn.boundary_tokens == ("<S>", "</S>")
    assert cnn.indexer_dictionaries(DEFAULT_NAMESPACE) == {}


def test_manylangs_cnn_gives_its_own_ids_boundaries_and_dictionaries():
    cnn = manylangs_cnn()
    for text in TEXTS:
        assert cnn.token_ids(text) == token_ids(text, CHARS, WORDS, MAX_CHARS)
    boundaries = boundary_ids(CHARS, WORDS, MAX_CHARS)
    assert cnn.boundary_ids() == (boundaries["<bos>"], boundaries["<eos>"])
    assert cnn.boundary_tokens == ("<bos>", "<eos>")
    assert cnn.indexer_dictionaries("other") == {
        chars_namespace("other"): CHARS,
        words_namespace("other"): WORDS,
    }


def test_rebuilt_from_the_architecture_each_computes_the_same_vectors():
    """What a downstream archive rebuilds from the recorded architecture: same outputs; the
    ELMoForManyLangs encoder keeps its boundaries but, without a vocabulary, not its
    dictionaries (its indexer reads them from the archive's vocabulary)."""
    for cnn in (elmo_char_cnn(), manylangs_cnn()):
        ids = torch.tensor(
            [[cnn.token_ids(text) for text in TEXTS], [[0] * len(cnn.token_ids(""))] * 6]
        )
        new = rebuilt(cnn)
        assert isinstance(new, CharacterEncoder) and new.architecture == cnn.architecture
        assert new.boundary_ids() == cnn.boundary_ids()
        with torch.no_grad():
            assert torch.equal(new(ids), cnn(ids))
    without_dictionaries = rebuilt(manylangs_cnn())
    assert isinstance(without_dictionaries, CharacterEncoder)
    assert without_dictionaries.indexer_dictionaries(DEFAULT_NAMESPACE) == {}
    with pytest.raises(ConfigurationError, match="built without its dictionaries"):
        without_dictionaries.token_ids("ab")


def test_allennlp_models_character_encoding_reads_elmo_ids_with_its_configured_architecture():
    encoder = BiLmEncoder.from_architecture(
        {
            "token_embedder": CHARACTER_ENCODING,
            "contextualizer": {
                "type": "elmo_lstm",
                "input_dim": 3,
                "cell_size": 4,
                "num_layers": 1,
            },
        }
    )
    characters = encoder.characters
    assert characters.architecture == CHARACTER_ENCODING and characters.get_output_dim() == 6
    assert characters.boundary_ids() == elmo_char_cnn().boundary_ids()
    assert characters.token_ids("ab") == elmo_char_cnn().token_ids("ab")
    unbuilt = character_encoder(encoder.char_cnn)  # from a loaded model, not from its params
    with pytest.raises(ConfigurationError, match="architecture of this TokenCharactersEncoder"):
        assert unbuilt.architecture


def test_the_old_architecture_form_reads_as_an_elmo_char_cnn_with_current_keys():
    old = {
        "char_cnn": {"filters": [[1, 4]], "num_highway": 1, "projection_dim": 5},
        "contextualizer": {"type": "elmo_lstm", "input_dim": 5, "hidden_dim": 8},
    }
    assert current_architecture(old) == {
        "token_embedder": {
            "type": "elmo_char_cnn",
            "filters": [[1, 4]],
            "num_highway": 1,
            "projection_dim": 5,
        },
        "contextualizer": {"type": "elmo_lstm", "input_dim": 5, "cell_size": 8},
    }
    assert BiLmEncoder.from_architecture(old).contextualizer.cell_size == 8
