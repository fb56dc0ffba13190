"""A biLM encoder's architecture as a small JSON-able dict, so an encoder can be rebuilt (without
weights) wherever only the dict travels, e.g. inside a downstream model's archive.

    {"char_cnn": {ElmoCharCnn constructor arguments},
     "contextualizer": {"type": "elmo_lstm" | "elmo_transformer" | ..., its parameters}}

From an ELMo file folder the dict is derived from options.json; from our archive it is copied
from the archive's config.json, so any registered contextualizer (transformer too) rebuilds.
The contextualizer's dropout is set to 0 (a feature extractor, as allennlp's `Elmo`).
"""
import copy
import json
import os
import tarfile
from typing import Any, Dict, Tuple

from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import CONFIG_NAME
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.interop.load_bilm import OPTIONS_FILE, is_elmo_files_folder, load_bilm_encoder
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn

Architecture = Dict[str, Any]


def archive_config(archive_path: str) -> Dict[str, Any]:
    """config.json of a model.tar.gz or serialization folder (without loading the model)."""
    if os.path.isdir(archive_path):
        config_path = os.path.join(archive_path, CONFIG_NAME)
        if not os.path.isfile(config_path):
            raise ConfigurationError(f"{archive_path}: no {CONFIG_NAME} (not a model archive folder)")
        with open(config_path, encoding="utf-8") as source:
            return json.load(source)
    if not os.path.isfile(archive_path):
        raise ConfigurationError(f"biLM archive or ELMo files folder not found: {archive_path}")
    try:
        with tarfile.open(archive_path) as archive:
            member = archive.extractfile(CONFIG_NAME)
            if member is None:
                raise KeyError(CONFIG_NAME)
            return json.load(member)
    except (tarfile.TarError, KeyError, OSError, ValueError) as error:
        raise ConfigurationError(f"{archive_path}: not a readable model archive ({error})") from None


def _char_cnn_params(model_config: Dict[str, Any], archive_path: str) -> Dict[str, Any]:
    embedders = model_config.get("text_field_embedder", {}).get("token_embedders", {})
    for params in embedders.values():
        if isinstance(params, dict) and params.get("type") == "elmo_char_cnn":
            return {key: value for key, value in params.items() if key != "type"}
    raise ConfigurationError(f"{archive_path}: its model has no elmo_char_cnn token embedder")


def _without_dropout(params: Dict[str, Any]) -> Dict[str, Any]:
    params = copy.deepcopy(params)
    for key in list(params):
        if "dropout" in key and isinstance(params[key], (int, float)):
            params[key] = 0.0
    return params


def architecture_from_archive(archive_path: str) -> Architecture:
    model = archive_config(archive_path).get("model", {})
    if model.get("type") != "elmo_bilm" or "contextualizer" not in model:
        raise ConfigurationError(
            f"{archive_path} holds a {model.get('type', 'unknown')!r} model, not an ELMo biLM (elmo_bilm)"
        )
    return {
        "char_cnn": _char_cnn_params(model, archive_path),
        "contextualizer": _without_dropout(model["contextualizer"]),
    }


def architecture_from_options(options: Dict[str, Any], num_characters: int) -> Architecture:
    from elmo_plugin.interop.elmo_files import char_cnn_kwargs, lstm_params

    return {"char_cnn": char_cnn_kwargs(options, num_characters), "contextualizer": lstm_params(options)}


def build_encoder(architecture: Architecture) -> BiLmEncoder:
    """A randomly initialized encoder with this architecture."""
    try:
        char_cnn = ElmoCharCnn(**architecture["char_cnn"])
        contextualizer = Seq2SeqEncoder.from_params(Params(copy.deepcopy(architecture["contextualizer"])))
    except (KeyError, TypeError) as error:
        raise ConfigurationError(f"cannot build a biLM encoder from architecture {architecture}: {error}") from None
    return BiLmEncoder(char_cnn, contextualizer)


def load_encoder_and_architecture(path: str) -> Tuple[BiLmEncoder, Architecture]:
    """Our biLM model.tar.gz / serialization folder, or a folder with options.json +
    weights.hdf5 -> (encoder with its weights and no dropout, its architecture)."""
    if os.path.isdir(path) and not is_elmo_files_folder(path) and not os.path.isfile(os.path.join(path, CONFIG_NAME)):
        raise ConfigurationError(
            f"{path}: neither a model archive folder ({CONFIG_NAME}) nor an ELMo files folder ({OPTIONS_FILE})"
        )
    if is_elmo_files_folder(path):
        from elmo_plugin.interop.elmo_files import read_options

        encoder = load_bilm_encoder(path)
        architecture = architecture_from_options(
            read_options(os.path.join(path, OPTIONS_FILE)), encoder.char_cnn.char_embedding.num_embeddings
        )
    else:
        architecture = architecture_from_archive(path)
        encoder = load_bilm_encoder(path)
    rebuilt = build_encoder(architecture)
    try:
        rebuilt.load_state_dict(encoder.state_dict())
    except RuntimeError as error:
        raise ConfigurationError(f"{path}: its recorded architecture does not rebuild its biLM: {error}") from None
    return rebuilt.eval(), architecture
