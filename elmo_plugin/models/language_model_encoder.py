"""The biLM encoder of any bidirectional allennlp-models `LanguageModel`, ours or theirs: its
character encoder and its contextualizer, shared, not copied."""

from allennlp.common.checks import ConfigurationError
from allennlp.modules.token_embedders import EmptyEmbedder, TokenEmbedder
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.modules.bilm_encoder import BiLmEncoder


def model_character_encoder(model: LanguageModel) -> TokenEmbedder:
    """The one non-empty token embedder of a language model (as allennlp-models' embedder finds
    it; the `empty` one embeds the softmax targets)."""
    token_embedders = model._text_field_embedder._token_embedders
    embedders = [
        embedder for embedder in token_embedders.values() if not isinstance(embedder, EmptyEmbedder)
    ]
    if len(embedders) != 1:
        raise ConfigurationError(
            f"a biLM needs exactly one non-empty token embedder, this one has {len(embedders)}"
        )
    return embedders[0]


def language_model_encoder(model: LanguageModel) -> BiLmEncoder:
    """The character encoder and contextualizer of a bidirectional language model
    (allennlp-models' contextualizer is switched to return every layer)."""
    return BiLmEncoder(model_character_encoder(model), model._contextualizer)
