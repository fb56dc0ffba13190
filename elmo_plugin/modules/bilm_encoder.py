"""The biLM encoder: character CNN + contextualizer, every layer out. Shared by the language
model, the downstream embedder, the predictors and the commands."""
from typing import List, Tuple

import torch
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn


class BiLmEncoder(torch.nn.Module):
    """
    char ids (batch, tokens, 50) -> (layers, mask): `num_layers` tensors of shape
    (batch, tokens, output_dim), bottom first. Layer 0 is the character CNN output repeated to
    full width ([x; x]), layers 1..L the contextualizer's [forward; backward] outputs (as
    allennlp's `Elmo` lays them out). mask (batch, tokens) is False at padding tokens.
    The contextualizer must offer `all_layers(inputs, mask)`.
    """

    def __init__(self, char_cnn: ElmoCharCnn, contextualizer: Seq2SeqEncoder) -> None:
        super().__init__()
        self.char_cnn = char_cnn
        self.contextualizer = contextualizer

    @property
    def num_layers(self) -> int:
        return self.contextualizer.num_layers + 1

    def get_output_dim(self) -> int:
        return self.contextualizer.get_output_dim()

    def forward(self, char_ids: torch.Tensor) -> Tuple[List[torch.Tensor], torch.BoolTensor]:
        mask = (char_ids > 0).any(dim=-1)
        tokens = self.char_cnn(char_ids)
        return [torch.cat([tokens, tokens], dim=-1), *self.contextualizer.all_layers(tokens, mask)], mask
