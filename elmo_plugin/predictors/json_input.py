"""The input every elmo_plugin predictor takes: `{"sentence": "..."}` or `{"tokens": [...]}`."""

from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict


def input_tokens(json_dict: JsonDict) -> list[str]:
    """`tokens` as given, or `sentence` split on whitespace; an error when neither is there."""
    if "tokens" in json_dict:
        tokens = json_dict["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
            raise ConfigurationError(f'"tokens" must be a list of strings, got {tokens!r}')
        return tokens
    if "sentence" in json_dict:
        sentence = json_dict["sentence"]
        if not isinstance(sentence, str):
            raise ConfigurationError(f'"sentence" must be a string, got {sentence!r}')
        return sentence.split()
    raise ConfigurationError(
        f'expected {{"sentence": "..."}} or {{"tokens": [...]}}, got {json_dict!r}'
    )
