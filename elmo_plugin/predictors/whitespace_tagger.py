"""Predictor `whitespace_tagger`: a sentence tagger whose input is split on whitespace."""

from typing import Optional

from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict
from allennlp.data import DatasetReader, Instance, Token
from allennlp.models import Model
from allennlp.predictors.predictor import Predictor
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.predictors.json_input import input_tokens, json_line
from elmo_plugin.training.process_settings import ProcessSettings

EMPTY_OUTPUT = ("words", "tags", "logits", "mask")  # crf_tagger's outputs, one entry per token


@Predictor.register("whitespace_tagger")
class WhitespaceTaggerPredictor(Predictor):
    """
    For tagger archives (e.g. allennlp-models' `crf_tagger` trained with `conllu_tagging`):
    like allennlp's `sentence_tagger`, without its spaCy tokenizer (whose model is not
    installed). Input: `{"sentence": "..."}` (split on whitespace) or `{"tokens": [...]}`.
    Output: the model's output for the sentence; for `crf_tagger`: `words` (the tokens),
    `tags` (one tag per token), `logits` (tokens, num_tags) and `mask`. A sentence of no tokens
    gets these four empty without running the model (a tagger's encoder cannot take it), as the
    biLM predictors give an empty sentence empty outputs.
    The dataset reader's `text_to_instance` must take the list of Tokens first; a biLM archive
    (whose reader takes a line of text) is refused.
    Predictor arguments `keep_freed_heap` (default true) and `tf32` (default unset): the process
    settings (`ProcessSettings`), applied once when the predictor is built.
    """

    def __init__(
        self,
        model: Model,
        dataset_reader: DatasetReader,
        frozen: bool = True,
        keep_freed_heap: bool = True,
        tf32: Optional[bool] = None,
    ) -> None:
        if isinstance(model, LanguageModel):
            raise ConfigurationError(
                f"whitespace_tagger needs a tagger archive but this archive holds a "
                f"{type(model).__name__} model, a language model: predict with elmo_embeddings "
                "or elmo_lm_scorer"
            )
        super().__init__(model, dataset_reader, frozen)
        ProcessSettings(keep_freed_heap=keep_freed_heap, tf32=tf32).apply()

    def predict(self, sentence: str) -> JsonDict:
        return self.predict_json({"sentence": sentence})

    def predict_json(self, inputs: JsonDict) -> JsonDict:
        return self.predict_batch_json([inputs])[0]

    def predict_batch_json(self, inputs: list[JsonDict]) -> list[JsonDict]:
        """The model's output for each input; `EMPTY_OUTPUT` for one of no tokens."""
        sentences = [json_dict for json_dict in inputs if input_tokens(json_dict)]
        outputs = iter(super().predict_batch_json(sentences) if sentences else [])
        return [
            next(outputs) if input_tokens(json_dict) else {key: [] for key in EMPTY_OUTPUT}
            for json_dict in inputs
        ]

    def load_line(self, line: str) -> JsonDict:
        return json_line(line)

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        return self._dataset_reader.text_to_instance([Token(t) for t in input_tokens(json_dict)])
