"""The biLM encoder: character CNN + contextualizer, every layer out. Shared by the language
model, the downstream embedder, the predictors and the commands."""
import copy
from typing import Any, Dict, List, Tuple

import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.modules.bilm_contextualizer import BiLmContextualizer
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn

# An encoder's architecture as a JSON-able dict, enough to rebuild it without weights:
# {"char_cnn": {ElmoCharCnn arguments}, "contextualizer": {"type": "elmo_lstm" | ..., arguments}}
Architecture = Dict[str, Any]


class BiLmEncoder(torch.nn.Module):
    """
    char ids (batch, tokens, 50) -> (layers, mask): `num_layers` tensors of shape
    (batch, tokens, output_dim), bottom first. Layer 0 is the character CNN output repeated to
    full width ([x; x]), layers 1..L the contextualizer's [forward; backward] outputs (as
    allennlp's `Elmo` lays them out). mask (batch, tokens) is False at padding tokens.
    """

    def __init__(self, char_cnn: ElmoCharCnn, contextualizer: BiLmContextualizer) -> None:
        super().__init__()
        self.char_cnn = char_cnn
        self.contextualizer = contextualizer

    @classmethod
    def from_architecture(cls, architecture: Architecture) -> "BiLmEncoder":
        """A randomly initialized encoder with this architecture."""
        try:
            char_cnn = ElmoCharCnn(**architecture["char_cnn"])
            contextualizer = Seq2SeqEncoder.from_params(Params(copy.deepcopy(architecture["contextualizer"])))
        except (KeyError, TypeError) as error:
            raise ConfigurationError(f"cannot build a biLM encoder from architecture {architecture}: {error}") from None
        if not isinstance(contextualizer, BiLmContextualizer):
            raise ConfigurationError(f"a biLM needs an elmo_lstm or elmo_transformer contextualizer, not {architecture['contextualizer']}")
        return cls(char_cnn, contextualizer)

    @property
    def num_layers(self) -> int:
        return self.contextualizer.num_layers + 1

    def get_output_dim(self) -> int:
        return self.contextualizer.get_output_dim()

    def forward(self, char_ids: torch.Tensor) -> Tuple[List[torch.Tensor], torch.BoolTensor]:
        mask = (char_ids > 0).any(dim=-1)
        tokens = self.char_cnn(char_ids)
        return [torch.cat([tokens, tokens], dim=-1), *self.contextualizer.all_layers(tokens, mask)], mask
