"""Predictor `elmo_lm_scorer`: per-sentence perplexities and top-k next / previous words, from our
biLM or allennlp-models' bidirectional `language_model`."""

import math
from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import DatasetReader, Instance
from allennlp.models import Model
from allennlp.predictors.predictor import Predictor

from elmo_plugin.models.language_model_softmax import softmax_matrices
from elmo_plugin.predictors.bilm_predictor import BiLmPredictor, char_ids_of

DEFAULT_TOP_K = 5


def top_k_of(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ConfigurationError(f'"top_k" must be a non-negative integer, got {k!r}')
    return k


@Predictor.register("elmo_lm_scorer")
class ElmoLmScorerPredictor(BiLmPredictor):
    """
    Input: `{"sentence": "..."}` or `{"tokens": [...]}`, optional `"top_k"` (default 5).
    The sentence is scored as in pretraining, `<S> w1 .. wn </S>`, with the full softmax.
    Output (n tokens):

    - `tokens`: the n tokens;
    - `forward_log_probs`: n + 1 values, log p(w1 | <S>), ..., log p(wn | ..), log p(</S> | ..);
    - `backward_log_probs`: n + 1 values, log p(<S> | w1 ..), log p(w1 | w2 ..), ...,
      log p(wn | </S>);
    - `forward_perplexity`, `backward_perplexity`: exp of the mean negative log probability of
      each direction; `perplexity`: exp of the mean over both directions (the model's metric);
    - `top_next`, `top_previous`: for each of the n tokens, the k most likely next (forward LM)
      and previous (backward LM) words: lists of `{"word": str, "log_prob": float}`, best first.

    A word outside the biLM vocabulary is scored as the unknown token `@@UNKNOWN@@`, as in training.
    Predictor arguments `keep_freed_heap`, `tf32`: process settings, as every biLM predictor.
    """

    registered_as = "elmo_lm_scorer"

    def __init__(
        self,
        model: Model,
        dataset_reader: DatasetReader,
        frozen: bool = True,
        keep_freed_heap: bool = True,
        tf32: Optional[bool] = None,
    ) -> None:
        super().__init__(model, dataset_reader, frozen, keep_freed_heap, tf32)
        if self._bilm._softmax_loss is None:
            raise ConfigurationError("elmo_lm_scorer: this biLM archive has no softmax")

    def load_line(self, line: str) -> JsonDict:
        """The line's JSON, its `top_k` checked here so that a bad one is named by file:line."""
        inputs = super().load_line(line)
        top_k_of(inputs.get("top_k", DEFAULT_TOP_K))
        return inputs

    def predict_json(self, inputs: JsonDict) -> JsonDict:
        return self.predict_batch_json([inputs])[0]

    def predict_batch_json(self, inputs: list[JsonDict]) -> list[JsonDict]:
        top_ks = [top_k_of(json_dict.get("top_k", DEFAULT_TOP_K)) for json_dict in inputs]
        return self._score(self._batch_json_to_instances(inputs), top_ks)

    def predict_instance(self, instance: Instance) -> JsonDict:
        return self._score([instance], [DEFAULT_TOP_K])[0]

    def predict_batch_instance(self, instances: list[Instance]) -> list[JsonDict]:
        return self._score(instances, [DEFAULT_TOP_K] * len(instances))

    def _words(self, rows: torch.Tensor) -> list[str]:
        return [self._model.vocab.get_token_from_index(row + 1) for row in rows.tolist()]

    def _top(self, log_probs: torch.Tensor, k: int) -> list[list[JsonDict]]:
        """(positions, V) log probs -> top k words per position; the last row (index V, no word)
        is left out."""
        k = min(k, log_probs.size(-1) - 1)
        values, rows = log_probs[:, :-1].topk(k, dim=-1)
        return [
            [
                {"word": word, "log_prob": value}
                for word, value in zip(self._words(r), v.tolist(), strict=False)
            ]
            for r, v in zip(rows, values, strict=False)
        ]

    def _score(self, instances: list[Instance], top_ks: list[int]) -> list[JsonDict]:
        tensors = self.tensors(instances)
        word_ids: Optional[torch.Tensor] = tensors.get("tokens", {}).get("tokens")
        if word_ids is None:
            raise ConfigurationError(
                "elmo_lm_scorer: the dataset reader has no `tokens` single-id indexer"
            )
        weight, bias = softmax_matrices(self._bilm)
        outputs = []
        with torch.no_grad():
            layers, mask = self._encoder(char_ids_of(tensors))
            forward_states, backward_states = layers[-1].chunk(2, dim=-1)
            for index, (instance, k) in enumerate(zip(instances, top_ks, strict=False)):
                length = int(mask[index].sum())  # n + 2
                ids = word_ids[index, :length] - 1  # softmax rows
                forward = torch.log_softmax(
                    forward_states[index, : length - 1] @ weight.t() + bias, dim=-1
                )
                backward = torch.log_softmax(
                    backward_states[index, 1:length] @ weight.t() + bias, dim=-1
                )
                forward_lp = forward.gather(1, ids[1:].unsqueeze(1)).squeeze(1)
                backward_lp = backward.gather(1, ids[: length - 1].unsqueeze(1)).squeeze(1)
                targets = length - 1
                outputs.append(
                    {
                        "tokens": [t.ensure_text() for t in instance["source"].tokens[1:-1]],  # type: ignore
                        "forward_log_probs": forward_lp.tolist(),
                        "backward_log_probs": backward_lp.tolist(),
                        "forward_perplexity": math.exp(-forward_lp.sum().item() / targets),
                        "backward_perplexity": math.exp(-backward_lp.sum().item() / targets),
                        "perplexity": math.exp(
                            -(forward_lp.sum() + backward_lp.sum()).item() / (2 * targets)
                        ),
                        "top_next": self._top(forward[1:], k),
                        "top_previous": self._top(backward[:-1], k),
                    }
                )
        return outputs
