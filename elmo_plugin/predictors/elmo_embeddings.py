"""Predictor `elmo_embeddings`: ELMo vectors of each input sentence from our biLM archive or
allennlp-models' bidirectional `language_model` archive."""

from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import DatasetReader, Instance
from allennlp.models import Model
from allennlp.modules.scalar_mix import ScalarMix
from allennlp.predictors.predictor import Predictor

from elmo_plugin.modules.bilm_sentence_layers import sentence_layers
from elmo_plugin.modules.sentence_pooling import check_pool, pool_tokens
from elmo_plugin.predictors.bilm_predictor import BiLmPredictor, char_ids_of


@Predictor.register("elmo_embeddings")
class ElmoEmbeddingsPredictor(BiLmPredictor):
    """
    Input: `{"sentence": "w1 w2 ..."}` (split on whitespace) or `{"tokens": ["w1", ...]}`.
    The sentence is encoded as in pretraining (`<S> w1 .. wn </S>`, from zero state) and the
    boundary positions are removed. Output (n tokens, L contextual layers, dim = 2 x projection):

    - `tokens`: the n tokens;
    - `layers`: (L + 1, n, dim): layer 0 = character CNN output repeated to full width,
      layer k = [forward; backward] output of contextual layer k;
    - `average`: (n, dim), the mean of all layers (what a fresh ScalarMix gives);
    - `mix`: (n, dim), only with predictor argument `scalar_mix_parameters` (one scalar per
      layer, plus optional `gamma`): gamma * sum_k softmax(s)_k * layer k, via allennlp's ScalarMix.

    With `pool` mean or max, the n tokens are pooled away after the layers are selected:
    `layers` (L + 1, dim), `average` (dim,), `mix` (dim,), and `num_tokens` = n is added;
    an empty sentence pools to zeros.

    # Parameters

    scalar_mix_parameters : `List[float]`, optional
        Pre-softmax mix weights s, one per layer; adds the output `mix`.
    gamma : `float`, optional (default = `1.0`)
        The mix's scale.
    pool : `str`, optional (default = `"none"`)
        `none` (a vector per token), `mean` or `max` (one vector per sentence, over its real
        tokens only, never `<S>`/`</S>` or padding).
    keep_freed_heap : `bool`, optional (default = `True`)
        A process setting, applied when the predictor is built (as every biLM predictor).
    tf32 : `bool`, optional (default = `None`)
        A process setting: TF32 matmuls on the GPU; `None` leaves torch's default.
    """

    registered_as = "elmo_embeddings"

    def __init__(
        self,
        model: Model,
        dataset_reader: DatasetReader,
        frozen: bool = True,
        scalar_mix_parameters: Optional[list[float]] = None,
        gamma: float = 1.0,
        pool: str = "none",
        keep_freed_heap: bool = True,
        tf32: Optional[bool] = None,
    ) -> None:
        super().__init__(model, dataset_reader, frozen, keep_freed_heap, tf32)
        self._pool = check_pool(pool, "elmo_embeddings predictor")
        self._scalar_mix: Optional[ScalarMix] = None
        if scalar_mix_parameters is not None:
            if len(scalar_mix_parameters) != self._encoder.num_layers:
                raise ConfigurationError(
                    f"scalar_mix_parameters has {len(scalar_mix_parameters)} values; the biLM has "
                    f"{self._encoder.num_layers} layers"
                )
            self._scalar_mix = ScalarMix(
                self._encoder.num_layers,
                initial_scalar_parameters=list(scalar_mix_parameters),
                trainable=False,
            )
            with torch.no_grad():
                self._scalar_mix.gamma.fill_(gamma)

    def predict_instance(self, instance: Instance) -> JsonDict:
        return self.predict_batch_instance([instance])[0]

    def predict_batch_instance(self, instances: list[Instance]) -> list[JsonDict]:
        with torch.no_grad():
            layers, lengths = sentence_layers(self._encoder, char_ids_of(self.tensors(instances)))
        outputs = []
        for instance, sentence, length in zip(
            instances, layers.cpu(), lengths.tolist(), strict=True
        ):
            vectors = sentence[:, :length]  # (layers, n, dim)
            tokens = [token.ensure_text() for token in instance["source"].tokens[1:-1]]  # type: ignore
            selected = {"layers": vectors, "average": vectors.mean(dim=0)}
            if self._scalar_mix is not None:
                with torch.no_grad():
                    selected["mix"] = self._scalar_mix(list(vectors))
            output: JsonDict = {"tokens": tokens}
            for key, value in selected.items():
                output[key] = pool_tokens(value, self._pool).tolist()
            if self._pool != "none":
                output["num_tokens"] = length
            outputs.append(output)
        return outputs
