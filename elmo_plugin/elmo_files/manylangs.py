"""An ELMoForManyLangs (HIT-SCIR) model folder -> a `BiLmEncoder` (`elmo_manylangs_cnn` +
`elmo_lstm`), its architecture and its dictionaries, read as its own `Embedder.get_model` reads
them (the reference: the `elmoformanylangs` package, 0.0.4.post2).

The folder: `config.json` (`config_path` names the architecture JSON), `char.dic`, `word.dic`
(when `word_dim` > 0), `token_embedder.pkl` and `encoder.pkl` (torch state dicts).
"""
import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from elmo_plugin.data.elmo_manylangs_indexer import BOS, BOW, EOS, EOW, OOV, PAD, boundary_ids, token_ids
from elmo_plugin.elmo_files.layout import ElmoFilesError
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder

FOLDER_FILES = ("config.json", "char.dic", "token_embedder.pkl", "encoder.pkl")
# The architecture of both JSON files the package bundles (`cnn_50_100_512_4096_sample.json`
# and `cnn_0_100_512_4096_sample.json`, identical), for folders that name one of them.
BUNDLED_CONFIG = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
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
    return os.path.isdir(path) and all(os.path.isfile(os.path.join(path, name)) for name in FOLDER_FILES[2:])


def read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as source:
            return json.load(source)
    except (OSError, ValueError) as error:
        raise ElmoFilesError(f"{path}: unreadable JSON ({error})") from None


def model_config(folder: str) -> Dict[str, Any]:
    """The architecture JSON, found as `Embedder.get_model` finds it: `config_path` as given
    (relative to the folder), its file name inside the folder, then a bundled config."""
    config_file = os.path.join(folder, "config.json")
    config_path = read_json(config_file).get("config_path")
    if not isinstance(config_path, str):
        raise ElmoFilesError(f"{config_file}: no string key 'config_path'")
    candidates = [os.path.join(folder, config_path), os.path.join(folder, os.path.basename(config_path))]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return read_json(candidate)
    if os.path.basename(config_path) in BUNDLED_CONFIGS:
        return BUNDLED_CONFIG
    raise ElmoFilesError(
        f"{config_file}: config_path {config_path!r} is neither in {folder} nor one of the package's "
        f"bundled configs {BUNDLED_CONFIGS}"
    )


def read_dictionary(path: str, specials: Tuple[str, ...]) -> Dict[str, int]:
    """A `.dic` file (token TAB id per line) as its `Embedder` reads it: each line stripped of
    surrounding whitespace, a line left with one field names U+3000 (the ideographic space the
    strip removed), later lines override earlier ones; lines split as Python's `codecs`
    reader splits them (`str.splitlines`)."""
    try:
        with open(path, encoding="utf-8", newline="") as source:
            lines = source.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ElmoFilesError(f"{path}: unreadable ({error})") from None
    dictionary: Dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        if len(fields) != 2 or not fields[1].strip().lstrip("-").isdigit() or int(fields[1]) < 0:
            raise ElmoFilesError(f"{path}, line {number}: expected 'token<TAB>id', got {line!r}")
        dictionary[fields[0]] = int(fields[1])
    missing = [token for token in specials if token not in dictionary]
    if missing:
        raise ElmoFilesError(f"{path}: lacks the special tokens {missing}")
    return dictionary


def manylangs_architecture(
    config: Dict[str, Any], chars: Dict[str, int], words: Optional[Dict[str, int]], folder: str
) -> Architecture:
    """Its architecture JSON -> ours; a clear error for what we do not support."""
    embedder, encoder = config.get("token_embedder", {}), config.get("encoder", {})
    if str(embedder.get("name", "")).lower() != "cnn" or str(encoder.get("name", "")).lower() != "elmo":
        raise ElmoFilesError(
            f"{folder}: token_embedder {embedder.get('name')!r} with encoder {encoder.get('name')!r} is not "
            "supported: only the 'cnn' token embedder with the 'elmo' encoder (ELMoForManyLangs' released models)"
        )
    max_chars = embedder["max_characters_per_token"]
    return {
        "token_embedder": {
            "type": "elmo_manylangs_cnn",
            "num_characters": max(chars.values()) + 1,
            "char_dim": embedder["char_dim"],
            "filters": embedder["filters"],
            "num_highway": embedder["n_highway"],
            "projection_dim": encoder["projection_dim"],
            "sentence_boundaries": boundary_ids(chars, words, max_chars),
            "num_words": max(words.values()) + 1 if words else 0,
            "word_dim": embedder["word_dim"],
            "activation": embedder.get("activation", "relu"),
        },
        "contextualizer": {
            "type": "elmo_lstm",
            "input_dim": encoder["projection_dim"],
            "cell_size": encoder["dim"],
            "num_layers": encoder["n_layers"],
            # its cell tests `if clip:`, so 0 means no clipping
            "cell_clip": encoder["cell_clip"] or None,
            "proj_clip": encoder["proj_clip"] or None,
        },
    }


def token_embedder_state(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """token_embedder.pkl's keys -> `ElmoManyLangsCnn`'s."""
    renamed = {"char_emb_layer.embedding.weight": "char_embedding.weight", "word_emb_layer.embedding.weight": "word_embedding.weight"}
    return {renamed.get(key, key): value for key, value in state.items()}


def encoder_state(state: Dict[str, torch.Tensor], num_layers: int) -> Dict[str, torch.Tensor]:
    """encoder.pkl (`LstmCellWithProjection`s, gates i, f, g, o as torch's) -> `elmo_lstm`'s
    torch LSTMs: input_linearity -> weight_ih, state_linearity -> weight_hh + bias_ih (bias_hh
    zero), state_projection -> weight_hr."""
    converted = {}
    for direction in ("forward", "backward"):
        for layer in range(num_layers):
            source, target = f"{direction}_layer_{layer}.", f"{direction}_layers.{layer}."
            bias = state[source + "state_linearity.bias"]
            converted.update({
                target + "weight_ih_l0": state[source + "input_linearity.weight"],
                target + "weight_hh_l0": state[source + "state_linearity.weight"],
                target + "bias_ih_l0": bias,
                target + "bias_hh_l0": torch.zeros_like(bias),
                target + "weight_hr_l0": state[source + "state_projection.weight"],
            })
    return converted


def load_state(path: str) -> Dict[str, torch.Tensor]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a damaged file
        raise ElmoFilesError(f"{path}: unreadable torch state dict ({error})") from None


def read_dictionaries(folder: str, config: Dict[str, Any]) -> Tuple[Dict[str, int], Optional[Dict[str, int]]]:
    """(char.dic, word.dic or None when its `word_dim` is 0)."""
    chars = read_dictionary(os.path.join(folder, "char.dic"), (OOV, PAD, BOW, EOW, BOS, EOS))
    if config.get("token_embedder", {}).get("word_dim", 0) > 0:
        return chars, read_dictionary(os.path.join(folder, "word.dic"), (OOV, PAD, BOS, EOS))
    return chars, None


def read_manylangs_folder(folder: str) -> Tuple[BiLmEncoder, Architecture, Dict[str, int], Optional[Dict[str, int]]]:
    """folder -> (encoder with its weights, eval mode; architecture; char and word dictionaries)."""
    config = model_config(folder)
    chars, words = read_dictionaries(folder, config)
    architecture = manylangs_architecture(config, chars, words, folder)
    encoder = BiLmEncoder.from_architecture(architecture)
    try:
        encoder.char_cnn.load_state_dict(token_embedder_state(load_state(os.path.join(folder, "token_embedder.pkl"))))
        num_layers = architecture["contextualizer"]["num_layers"]
        encoder.contextualizer.load_state_dict(encoder_state(load_state(os.path.join(folder, "encoder.pkl")), num_layers))
    except (RuntimeError, KeyError) as error:
        raise ElmoFilesError(f"{folder}: its weights do not fit its architecture ({error})") from None
    return encoder.eval(), architecture, chars, words


def sentence_ids(folder: str) -> Callable[[List[str]], List[List[int]]]:
    """tokens -> the ids of `<bos> tokens <eos>` as `elmo_manylangs_ids` and `elmo_bilm_embedder`
    give them to the biLM, with this folder's dictionaries."""
    config = model_config(folder)
    chars, words = read_dictionaries(folder, config)
    max_chars = config["token_embedder"]["max_characters_per_token"]
    boundaries = boundary_ids(chars, words, max_chars)
    return lambda tokens: [boundaries[BOS], *(token_ids(t, chars, words, max_chars) for t in tokens), boundaries[EOS]]
