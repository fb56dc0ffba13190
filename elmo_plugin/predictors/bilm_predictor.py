"""What the biLM predictors share: the archive must hold a bidirectional language model (our
`elmo_bilm` or allennlp-models' `language_model`), and JSON inputs become one indexed tensor
batch on the predictor's device."""

from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import DatasetReader, Instance, Token, TokenIndexer
from allennlp.data.batch import Batch
from allennlp.data.dataset_readers import ShardedDatasetReader
from allennlp.data.fields import TextField
from allennlp.models import Model
from allennlp.nn import util as nn_util
from allennlp.predictors.predictor import Predictor

from elmo_plugin.archives.bilm_archive import check_bidirectional_language_model
from elmo_plugin.data.elmo_vocab_file import BOS, EOS
from elmo_plugin.models.language_model_encoder import language_model_encoder
from elmo_plugin.predictors.json_input import input_tokens, json_line
from elmo_plugin.training.process_settings import ProcessSettings


def reader_token_indexers(reader: DatasetReader) -> dict[str, TokenIndexer]:
    """The token indexers of a language-model reader (`elmo_corpus`, allennlp-models'
    `simple_language_modeling`, or a `sharded` reader around one). Neither allennlp nor
    allennlp-models exposes them publicly: both readers keep them in `_token_indexers`."""
    base = reader.reader if isinstance(reader, ShardedDatasetReader) else reader
    indexers = getattr(base, "_token_indexers", None)
    if not indexers:
        raise ConfigurationError(
            f"the archive's dataset reader ({type(base).__name__}) has no token indexers"
        )
    return indexers


class BiLmPredictor(Predictor):
    """Input `{"sentence": "w1 w2 ..."}` (split on whitespace) or `{"tokens": ["w1", ...]}`,
    indexed as the biLM's dataset reader indexes a line, `<S> w1 .. wn </S>`.
    Predictor arguments `keep_freed_heap` (default true) and `tf32` (default unset): the process
    settings (`ProcessSettings`), applied once when the predictor is built."""

    registered_as = "a biLM predictor"  # the subclass's registered name, for error messages

    def __init__(
        self,
        model: Model,
        dataset_reader: DatasetReader,
        frozen: bool = True,
        keep_freed_heap: bool = True,
        tf32: Optional[bool] = None,
    ) -> None:
        super().__init__(model, dataset_reader, frozen)
        self._bilm = check_bidirectional_language_model(
            model, f"{self.registered_as} needs an ELMo biLM archive but this archive"
        )
        self._encoder = language_model_encoder(self._bilm)
        self._token_indexers = reader_token_indexers(dataset_reader)
        ProcessSettings(keep_freed_heap=keep_freed_heap, tf32=tf32).apply()

    def load_line(self, line: str) -> JsonDict:
        return json_line(line)

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        tokens = [Token(BOS), *(Token(t) for t in input_tokens(json_dict)), Token(EOS)]
        return Instance({"source": TextField(tokens, self._token_indexers)})

    def tensors(self, instances: list[Instance]) -> dict[str, dict[str, torch.Tensor]]:
        """The instances' `source` field as one padded batch: indexer name -> tensors."""
        for instance in instances:
            self._dataset_reader.apply_token_indexers(instance)  # instances the reader made
        batch = Batch(instances)
        batch.index_instances(self._model.vocab)
        return nn_util.move_to_device(batch.as_tensor_dict(), self.cuda_device)["source"]


def char_ids_of(text_field_tensors: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
    """The `elmo_tokens` tensor (batch, tokens, 50) among a text field's indexer outputs."""
    for indexed in text_field_tensors.values():
        if "elmo_tokens" in indexed:
            return indexed["elmo_tokens"]
    raise ConfigurationError(
        "the dataset reader has no ELMo character indexer (elmo_char_ids or elmo_characters: "
        "no `elmo_tokens` key)"
    )
