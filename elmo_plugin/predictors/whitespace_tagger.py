"""Predictor `whitespace_tagger`: a sentence tagger whose input is split on whitespace."""

from allennlp.common.util import JsonDict
from allennlp.data import Instance, Token
from allennlp.predictors.predictor import Predictor

from elmo_plugin.predictors.json_input import input_tokens, json_line


@Predictor.register("whitespace_tagger")
class WhitespaceTaggerPredictor(Predictor):
    """
    For tagger archives (e.g. allennlp-models' `crf_tagger` trained with `conllu_tagging`):
    like allennlp's `sentence_tagger`, without its spaCy tokenizer (whose model is not
    installed). Input: `{"sentence": "..."}` (split on whitespace) or `{"tokens": [...]}`.
    Output: the model's output for the sentence; for `crf_tagger`: `words` (the tokens),
    `tags` (one tag per token), `logits` (tokens, num_tags) and `mask`.
    The dataset reader's `text_to_instance` must take the list of Tokens first.
    """

    def predict(self, sentence: str) -> JsonDict:
        return self.predict_json({"sentence": sentence})

    def load_line(self, line: str) -> JsonDict:
        return json_line(line)

    def _json_to_instance(self, json_dict: JsonDict) -> Instance:
        return self._dataset_reader.text_to_instance([Token(t) for t in input_tokens(json_dict)])
