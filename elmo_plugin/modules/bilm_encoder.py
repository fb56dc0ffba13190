"""The biLM encoder: character encoder + contextualizer, every layer out. Shared by the language
model, the downstream embedder, the predictors and the commands."""

import copy
from typing import Any, Optional, cast

import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer
from elmo_plugin.modules.character_encoder import CharacterEncoder, character_encoder

# An encoder's architecture as a JSON-able dict, enough to rebuild it without weights:
# {"token_embedder": {"type": "elmo_char_cnn" | "elmo_manylangs_cnn" | allennlp-models'
# "character_encoding", arguments}, "contextualizer": {"type": "elmo_lstm" | "elmo_transformer" |
# "bidirectional_language_model_transformer", arguments}}.
Architecture = dict[str, Any]

# The key of an `elmo_char_cnn`'s arguments in architectures recorded before the one form.
OLD_CHAR_CNN_KEY = "char_cnn"
# An `elmo_char_cnn` key no longer read (it chose the GPU's computation on a CPU).
DROPPED_CHAR_CNN_KEY = "cpu_path"


def current_architecture(architecture: Architecture) -> Architecture:
    """An architecture as recorded on any day -> the current form: `char_cnn` read as an
    `elmo_char_cnn` token embedder (without `cpu_path`), our contextualizers' renamed keys under
    their current names."""
    current = dict(architecture)
    if OLD_CHAR_CNN_KEY in current:
        current["token_embedder"] = {"type": "elmo_char_cnn", **current.pop(OLD_CHAR_CNN_KEY)}
    token_embedder = current.get("token_embedder")
    if isinstance(token_embedder, dict) and token_embedder.get("type") == "elmo_char_cnn":
        current["token_embedder"] = {
            key: value for key, value in token_embedder.items() if key != DROPPED_CHAR_CNN_KEY
        }
    contextualizer = current.get("contextualizer")
    if isinstance(contextualizer, dict) and contextualizer.get("type"):
        registered = Seq2SeqEncoder.resolve_class_name(contextualizer["type"])[0]
        if issubclass(registered, BiLmContextualizer):
            current["contextualizer"] = registered.with_current_keys(contextualizer)
    return current


# allennlp-models' convention for a contextualizer that can return every layer
# (`LanguageModelTokenEmbedder` sets `return_all_layers` through archive overrides).
RETURN_ALL_LAYERS_FLAGS = ("return_all_layers", "_return_all_layers")


def return_all_layers(contextualizer: Seq2SeqEncoder) -> None:
    """Makes a contextualizer built with allennlp-models' `return_all_layers: false` return every
    layer: sets that flag wherever it is stored (the module and its stacks); an error if none is.
    The flag only selects outputs, so no weight changes."""
    flags = [
        (module, name)
        for module in contextualizer.modules()
        for name in RETURN_ALL_LAYERS_FLAGS
        if name in vars(module)
    ]
    if (
        not flags
        or not hasattr(contextualizer, "num_layers")
        or not contextualizer.is_bidirectional()
    ):
        raise ConfigurationError(
            "a biLM needs a bidirectional contextualizer with `num_layers` and "
            "`return_all_layers` (elmo_lstm, elmo_transformer or "
            "bidirectional_language_model_transformer), not "
            f"{type(contextualizer).__name__}"
        )
    for module, name in flags:
        setattr(module, name, True)


class BiLmEncoder(torch.nn.Module):
    """
    char ids (batch, tokens, 50) -> (layers, mask): `num_layers` tensors of shape
    (batch, tokens, output_dim), bottom first. Layer 0 is the character encoder's output repeated
    to full width ([x; x]), layers 1..L the contextualizer's [forward; backward] outputs (as
    allennlp's `Elmo` and allennlp-models' `bidirectional_lm_token_embedder` lay them out).
    mask (batch, tokens) is False at padding tokens.

    `char_cnn`: a `CharacterEncoder` (`ElmoCharCnn`, `ElmoManyLangsCnn`), or any token embedder
    over ELMo's character ids (allennlp-models' walkthrough uses `character_encoding`; its
    params, where known, are `char_architecture`); `characters` is it as a `CharacterEncoder`.
    `contextualizer`: ours, or a bidirectional one that returns every layer with
    `return_all_layers` (set here).
    """

    def __init__(
        self,
        char_cnn: TokenEmbedder,
        contextualizer: Seq2SeqEncoder,
        char_architecture: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        if not isinstance(contextualizer, BiLmContextualizer):
            return_all_layers(contextualizer)
        if contextualizer.get_output_dim() % char_cnn.get_output_dim() != 0:
            raise ConfigurationError(
                f"the biLM's character encoder width {char_cnn.get_output_dim()} does not divide "
                f"its contextualizer's {contextualizer.get_output_dim()}"
            )
        self.char_cnn = char_cnn
        self.contextualizer = contextualizer
        self._char_architecture = char_architecture

    @property
    def characters(self) -> CharacterEncoder:
        """The character encoder's ids, boundaries, width and architecture."""
        return character_encoder(self.char_cnn, self._char_architecture)

    @classmethod
    def from_architecture(
        cls, architecture: Architecture, vocab: Optional[Vocabulary] = None
    ) -> "BiLmEncoder":
        """A randomly initialized encoder with this architecture (in any recorded form). `vocab`:
        what the character encoder reads from a vocabulary (an ELMoForManyLangs model's
        dictionaries), where it is to index tokens itself."""
        try:
            current = current_architecture(architecture)
            token_embedder = current["token_embedder"]
            char_cnn = TokenEmbedder.from_params(Params(copy.deepcopy(token_embedder)), vocab=vocab)
            contextualizer = Seq2SeqEncoder.from_params(
                Params(copy.deepcopy(current["contextualizer"]))
            )
        except (KeyError, TypeError) as error:
            raise ConfigurationError(
                f"cannot build a biLM encoder from architecture {architecture}: {error}"
            ) from None
        return cls(char_cnn, contextualizer, token_embedder)

    @property
    def num_layers(self) -> int:
        # an int: ours define it, return_all_layers checked that the others have it
        return cast(int, self.contextualizer.num_layers) + 1

    def get_output_dim(self) -> int:
        return self.contextualizer.get_output_dim()

    def contextual_layers(self, tokens: torch.Tensor, mask: torch.BoolTensor) -> list[torch.Tensor]:
        if isinstance(self.contextualizer, BiLmContextualizer):
            return self.contextualizer.all_layers(tokens, mask)
        return list(self.contextualizer(tokens, mask))  # built to return every layer

    def layers_from_tokens(
        self, tokens: torch.Tensor, mask: torch.BoolTensor
    ) -> list[torch.Tensor]:
        """The character encoder's output (batch, tokens, char_dim), zero at padding, -> every
        layer (as `forward`), for callers that compute or cache the token vectors themselves."""
        repeats = self.get_output_dim() // tokens.size(-1)
        return [torch.cat([tokens] * repeats, dim=-1), *self.contextual_layers(tokens, mask)]

    def forward(self, char_ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.BoolTensor]:
        mask = cast(torch.BoolTensor, (char_ids > 0).any(dim=-1))
        return self.layers_from_tokens(self.char_cnn(char_ids), mask), mask
