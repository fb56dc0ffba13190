"""The input every elmo_plugin predictor takes: `{"sentence": "..."}` or `{"tokens": [...]}`, one
JSON object per line."""

import json

from allennlp.common.checks import ConfigurationError
from allennlp.common.util import JsonDict

LINE_START = 60  # characters of an offending line quoted in its error


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
        f'expected {{"sentence": "..."}} or {{"tokens": [...]}}, got keys {sorted(json_dict)}'
    )


def json_line(line: str) -> JsonDict:
    """One input line (`allennlp predict`'s JSON lines) -> its JSON object, checked to hold a
    sentence; a one-line ConfigurationError quoting the line's start and saying what is wrong
    (`allennlp predict` ends with it, naming the file and line: `commands.predict_output`)."""
    text = line.strip()
    where = f"input line {text[:LINE_START]!r}{'...' if len(text) > LINE_START else ''}"
    try:
        json_dict = json.loads(text)
    except json.JSONDecodeError as error:
        problem = error.msg.removesuffix(" at")
        raise ConfigurationError(f"{where}: not JSON ({problem} at column {error.colno})") from None
    if not isinstance(json_dict, dict):
        raise ConfigurationError(f"{where}: not a JSON object but {type(json_dict).__name__}")
    try:
        input_tokens(json_dict)
    except ConfigurationError as error:
        raise ConfigurationError(f"{where}: {error}") from None
    return json_dict
