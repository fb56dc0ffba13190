"""The text files of an ELMoForManyLangs (HIT-SCIR) model folder: its architecture JSON and its
`char.dic` / `word.dic`, read as its own `Embedder.get_model` reads them (the reference: the
`elmoformanylangs` package, 0.0.4.post2)."""

import json
import os
from typing import Any, Optional

from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.elmo_manylangs_indexer import BOS, BOW, EOS, EOW, OOV, PAD

FOLDER_FILES = ("config.json", "char.dic", "token_embedder.pkl", "encoder.pkl")
# The architecture of both JSON files the package bundles (`cnn_50_100_512_4096_sample.json`
# and `cnn_0_100_512_4096_sample.json`, identical), for folders that name one of them.
BUNDLED_CONFIG = {
    "encoder": {
        "name": "elmo",
        "projection_dim": 512,
        "cell_clip": 3,
        "proj_clip": 3,
        "dim": 4096,
        "n_layers": 2,
    },
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
BUNDLED_CONFIGS = ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")


def is_manylangs_folder(path: str) -> bool:
    return os.path.isdir(path) and all(
        os.path.isfile(os.path.join(path, name)) for name in FOLDER_FILES[2:]
    )


def read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as source:
            return json.load(source)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"{path}: unreadable JSON ({error})") from None


def model_config(folder: str) -> dict[str, Any]:
    """The architecture JSON, found as `Embedder.get_model` finds it: `config_path` as given
    (relative to the folder), its file name inside the folder, then a bundled config."""
    config_file = os.path.join(folder, "config.json")
    config_path = read_json(config_file).get("config_path")
    if not isinstance(config_path, str):
        raise ConfigurationError(f"{config_file}: no string key 'config_path'")
    candidates = [
        os.path.join(folder, config_path),
        os.path.join(folder, os.path.basename(config_path)),
    ]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return read_json(candidate)
    if os.path.basename(config_path) in BUNDLED_CONFIGS:
        return BUNDLED_CONFIG
    raise ConfigurationError(
        f"{config_file}: config_path {config_path!r} is neither in {folder} nor one of the "
        f"package's bundled configs {BUNDLED_CONFIGS}"
    )


def read_dictionary(path: str, specials: tuple[str, ...]) -> dict[str, int]:
    """A `.dic` file (token TAB id per line) as its `Embedder` reads it: each line stripped of
    surrounding whitespace, a line left with one field names U+3000 (the ideographic space the
    strip removed); lines split as Python's `codecs` reader splits them (`str.splitlines`).
    The ids must be 0..n-1, one per entry (its embedding has n rows)."""
    try:
        with open(path, encoding="utf-8", newline="") as source:
            lines = source.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"{path}: unreadable ({error})") from None
    dictionary: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            token, index = fields
            dictionary[token] = int(index)
        except ValueError:
            raise ConfigurationError(
                f"{path}, line {number}: expected 'token<TAB>id', got {line!r}"
            ) from None
    if sorted(dictionary.values()) != list(range(len(dictionary))):
        # its embedding has one row per entry: ids beyond them, or shared, cannot be looked up
        raise ConfigurationError(
            f"{path}: its ids are not 0..{len(dictionary) - 1}, each used once"
        )
    missing = [token for token in specials if token not in dictionary]
    if missing:
        raise ConfigurationError(f"{path}: lacks the special tokens {missing}")
    return dictionary


def read_dictionaries(
    folder: str, config: dict[str, Any]
) -> tuple[dict[str, int], Optional[dict[str, int]]]:
    """(char.dic, word.dic or None when its `word_dim` is 0)."""
    chars = read_dictionary(os.path.join(folder, "char.dic"), (OOV, PAD, BOW, EOW, BOS, EOS))
    if config.get("token_embedder", {}).get("word_dim", 0) > 0:
        return chars, read_dictionary(os.path.join(folder, "word.dic"), (OOV, PAD, BOS, EOS))
    return chars, None
