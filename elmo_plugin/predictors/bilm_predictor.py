"""What the biLM predictors share: the archive must hold our biLM, and JSON inputs become one
indexed tensor batch on the predictor's device."""
from typing import Dict, List

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import DatasetReader, Instance, Token
from allennlp.data.batch import Batch
from allennlp.models import Model
from allennlp.nn import util as nn_util
from allennlp.predictors.predictor import Predictor

from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.predictors.json_input import input_tokens


class BiLmPredictor(Predictor):
    """Input `{"sentence": "w1 w2 ..."}` (split on whitespace) or `{"tokens": ["w1", ...]}`,
    read as the biLM's dataset reader reads a line (`<S> w1 .. wn </S>`)."""

    registered_as = "a biLM predictor"  # the subclass's registered name, for error messages

    def __init__(self, model: Model, dataset_reader: DatasetReader, frozen: bool = True) -> None:
        super().__init__(model, dataset_reader, frozen)
        if not isinstance(model, ElmoLanguageModel):
            raise ConfigurationError(
                f"{self.registered_as} needs an ELMo biLM archive (model elmo_bilm); this archive holds a "
                f"{type(model).__name__}"
            )
        self._bilm = model
        self._encoder = model.bilm_encoder()

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        return self._dataset_reader.text_to_instance(tokens=[Token(t) for t in input_tokens(json_dict)])

    def tensors(self, instances: List[Instance]) -> Dict[str, Dict[str, torch.Tensor]]:
        """The instances' `source` field as one padded batch: indexer name -> tensors."""
        for instance in instances:
            self._dataset_reader.apply_token_indexers(instance)
        batch = Batch(instances)
        batch.index_instances(self._model.vocab)
        return nn_util.move_to_device(batch.as_tensor_dict(), self.cuda_device)["source"]


def char_ids_of(text_field_tensors: Dict[str, Dict[str, torch.Tensor]]) -> torch.Tensor:
    """The `elmo_tokens` tensor (batch, tokens, 50) among a text field's indexer outputs."""
    for indexed in text_field_tensors.values():
        if "elmo_tokens" in indexed:
            return indexed["elmo_tokens"]
    raise ConfigurationError("the dataset reader has no elmo_char_ids indexer (no `elmo_tokens` key)")
