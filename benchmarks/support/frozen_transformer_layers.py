"""`pretrained_transformer_mismatched_frozen`: allennlp's `pretrained_transformer_mismatched`
embedder with the transformer frozen (`train_parameters` false) and in eval mode, each
sentence's layers computed once per process (each downstream run computes them once, instead
of every epoch). It is the quality table's frozen BERT row. Only the learned scalar mix trains;
a sentence's layers are those the transformer gives it in any batch (eval mode, padding
masked), for the weights it had when first computed: the cache is for a transformer that no
longer changes."""

from typing import Any, Optional

import torch
from allennlp.modules.token_embedders import PretrainedTransformerMismatchedEmbedder, TokenEmbedder
from transformers.modeling_outputs import BaseModelOutput


class LayerCache(torch.nn.Module):
    """`model`'s hidden states (embeddings and every layer) per sentence, kept in memory and
    keyed by its wordpiece ids: called as a `transformers` model with `input_ids` and
    `attention_mask` (batch, wordpieces), it runs `model` on the sentences it has not seen."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self._layers: dict[tuple[int, ...], torch.Tensor] = {}

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: Optional[torch.Tensor] = None,
    ) -> BaseModelOutput:
        assert token_type_ids is None, "one segment per sentence"
        lengths = attention_mask.sum(1).long().tolist()
        keys = [tuple(row[:n].tolist()) for row, n in zip(input_ids, lengths, strict=True)]
        if missing := [i for i, key in enumerate(keys) if key not in self._layers]:
            with torch.no_grad():
                states = self.model(
                    input_ids=input_ids[missing],
                    attention_mask=attention_mask[missing],
                    output_hidden_states=True,
                ).hidden_states
            for row, i in enumerate(missing):
                self._layers[keys[i]] = torch.stack([h[row, : lengths[i]] for h in states])
        first = self._layers[keys[0]]
        hidden = first.new_zeros(first.size(0), *input_ids.shape, first.size(-1))
        for i, key in enumerate(keys):
            hidden[:, i, : lengths[i]] = self._layers[key]
        return BaseModelOutput(last_hidden_state=hidden[-1], hidden_states=tuple(hidden))


@TokenEmbedder.register("pretrained_transformer_mismatched_frozen")
class FrozenTransformerMismatchedEmbedder(PretrainedTransformerMismatchedEmbedder):
    """`pretrained_transformer_mismatched` with `train_parameters` false and the transformer in
    eval mode (fixed), its layers from a `LayerCache`; `last_layer_only` defaults to false (a
    learned scalar mix over the layers, as the biLMs are used). Output (batch, words, hidden
    size)."""

    def __init__(self, model_name: str, last_layer_only: bool = False, **kwargs: Any) -> None:
        super().__init__(
            model_name, train_parameters=False, last_layer_only=last_layer_only, **kwargs
        )
        matched = self._matched_embedder
        matched.eval_mode = True  # no dropout inside: the same layers in every batch
        matched.transformer_model = LayerCache(matched.transformer_model)
