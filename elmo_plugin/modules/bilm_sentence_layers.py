"""Every biLM layer for whole sentences, `<S>` / `</S>` removed: shared by the `elmo_embeddings`
predictor and `allennlp elmo-embed`, so both give the same vectors."""

import torch
from allennlp.nn.util import remove_sentence_boundaries

from elmo_plugin.modules.bilm_encoder import BiLmEncoder


def sentence_layers(
    encoder: BiLmEncoder, char_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    char_ids (batch, tokens + 2, 50) for `<S> w1 .. wn </S>`, right-padded ->
    (layers (batch, num_layers, tokens, dim), lengths (batch,) = n of each sentence).
    Layer 0 is the character CNN output repeated to full width; padding positions are zero.
    """
    return without_boundaries(*encoder(char_ids))


def without_boundaries(
    layers: list[torch.Tensor], mask: torch.BoolTensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every layer (batch, tokens + 2, dim) of `<S> w1 .. wn </S>` and its mask ->
    `sentence_layers`'s (layers (batch, num_layers, tokens, dim), lengths (batch,))."""
    trimmed: list[torch.Tensor] = []
    new_mask: torch.Tensor = mask
    for layer in layers:
        inner, new_mask = remove_sentence_boundaries(layer, mask)
        trimmed.append(inner)
    return torch.stack(trimmed, dim=1), new_mask.sum(dim=1)
