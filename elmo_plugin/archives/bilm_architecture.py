"""A biLM's architecture (`modules.bilm_encoder.Architecture`) from our archive, allennlp-models'
bidirectional `language_model` archive or an ELMo file folder, so an encoder can be rebuilt
(without weights) wherever only the dict travels, e.g. inside a downstream model's archive.

From an ELMo file folder the dict is derived from options.json; from an archive it is copied
from the archive's config.json (the character encoder's and the contextualizer's params), so
any registered component (transformer too) rebuilds through `from_params`. Dropouts are set
to 0 (a feature extractor, as allennlp's `Elmo`).
"""

import copy
import json
import os
import tarfile
from typing import Any, Optional, cast

from allennlp.common.checks import ConfigurationError
from allennlp.models import Model
from allennlp.models.archival import CONFIG_NAME
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.archives.bilm_archive import (
    check_known_folder,
    is_elmo_files_folder,
    load_bilm_encoder,
    local_archive,
)
from elmo_plugin.archives.safe_archive import checked_members, open_archive, require_model_folder
from elmo_plugin.data.elmo_manylangs_files import is_manylangs_folder
from elmo_plugin.elmo_files.layout import OPTIONS_FILE
from elmo_plugin.elmo_files.manylangs import read_manylangs_folder
from elmo_plugin.elmo_files.options import architecture_from_options, read_options
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.elmo_manylangs_cnn import ElmoManyLangsCnn

# Keys renamed since archives were first made: old name -> new name, per contextualizer type.
RENAMED_KEYS = {
    "elmo_lstm": {"hidden_dim": "cell_size"},
    "elmo_transformer": {"hidden_dim": "feedforward_hidden_dim"},
}


def archive_config(archive_path: str) -> dict[str, Any]:
    """config.json of a model.tar.gz (its members checked first, nothing extracted) or
    serialization folder, without loading the model."""
    path = local_archive(archive_path)
    if os.path.isdir(path):
        require_model_folder(path)
        with open(os.path.join(path, CONFIG_NAME), encoding="utf-8") as source:
            return json.load(source)
    with open_archive(path) as archive:
        members = {
            os.path.normpath(member.name): member for member in checked_members(archive, path)
        }
        try:
            # checked_members found config.json as a regular file: extractfile gives a file
            return json.load(archive.extractfile(members[CONFIG_NAME]))  # type: ignore[arg-type]
        except (tarfile.TarError, OSError, EOFError, ValueError) as error:
            raise ConfigurationError(
                f"{archive_path}: unreadable {CONFIG_NAME} ({error})"
            ) from None


def _char_cnn_params(model_config: dict[str, Any], archive_path: str) -> dict[str, Any]:
    embedders = model_config.get("text_field_embedder", {}).get("token_embedders", {})
    for params in embedders.values():
        if isinstance(params, dict) and params.get("type") == "elmo_char_cnn":
            return {key: value for key, value in params.items() if key != "type"}
    raise ConfigurationError(f"{archive_path}: its model has no elmo_char_cnn token embedder")


def _manylangs_params(model_config: dict[str, Any]) -> Optional[dict[str, Any]]:
    embedders = model_config.get("text_field_embedder", {}).get("token_embedders", {})
    found = [
        p
        for p in embedders.values()
        if isinstance(p, dict) and p.get("type") == "elmo_manylangs_cnn"
    ]
    return found[0] if found else None


def _character_encoder_params(model_config: dict[str, Any], archive_path: str) -> dict[str, Any]:
    """The one non-empty token embedder's params of a `language_model` config."""
    embedders = model_config.get("text_field_embedder", {}).get("token_embedders", {})
    non_empty = [
        params
        for params in embedders.values()
        if isinstance(params, dict) and params.get("type") != "empty"
    ]
    if len(non_empty) != 1:
        raise ConfigurationError(
            f"{archive_path}: a biLM needs exactly one non-empty token embedder, it has "
            f"{len(non_empty)}"
        )
    return non_empty[0]


def _is_language_model(model_type: Any) -> bool:
    """Whether a registered model name is allennlp-models' `LanguageModel` or a subclass."""
    try:
        return isinstance(model_type, str) and issubclass(
            Model.resolve_class_name(model_type)[0], LanguageModel
        )
    except ConfigurationError:  # not a registered name
        return False


def _without_dropout(params: dict[str, Any]) -> dict[str, Any]:
    params = copy.deepcopy(params)
    for key in list(params):
        if "dropout" in key and isinstance(params[key], (int, float)):
            params[key] = 0.0
    return params


def architecture_from_archive(archive_path: str) -> Architecture:
    model = archive_config(archive_path).get("model", {})
    if "contextualizer" not in model or not _is_language_model(model.get("type")):
        raise ConfigurationError(
            f"{archive_path} holds a {model.get('type', 'unknown')!r} model, not an ELMo biLM "
            "(elmo_bilm, or allennlp-models' language_model with bidirectional: true)"
        )
    contextualizer = _without_dropout(model["contextualizer"])
    manylangs = _manylangs_params(model) if model["type"] == "elmo_bilm" else None
    if manylangs is not None:
        # completed from the loaded module (its sizes come from the archive's vocabulary)
        return {"token_embedder": manylangs, "contextualizer": contextualizer}
    if model["type"] == "elmo_bilm":
        return with_current_keys(
            {"char_cnn": _char_cnn_params(model, archive_path), "contextualizer": contextualizer}
        )
    if not model.get("bidirectional", False):
        raise ConfigurationError(
            f"{archive_path} holds a unidirectional language_model (bidirectional: false): ELMo "
            "needs a forward and a backward language model (bidirectional: true)"
        )
    return {
        "token_embedder": _without_dropout(_character_encoder_params(model, archive_path)),
        "contextualizer": contextualizer,
    }


def with_current_keys(architecture: Architecture) -> Architecture:
    """The same architecture with renamed contextualizer keys under their current names (a
    downstream archive records the keys of the day it was made)."""
    contextualizer = dict(architecture["contextualizer"])
    for old, new in RENAMED_KEYS.get(contextualizer.get("type", ""), {}).items():
        if old in contextualizer:
            contextualizer[new] = contextualizer.pop(old)
    return {**architecture, "contextualizer": contextualizer}


def load_encoder_and_architecture(path: str) -> tuple[BiLmEncoder, Architecture]:
    """Our biLM model.tar.gz / serialization folder, allennlp-models' bidirectional
    `language_model` archive, a folder with options.json + weights.hdf5, or an ELMoForManyLangs
    model folder -> (encoder with its weights and no dropout, its architecture)."""
    if is_manylangs_folder(path):
        encoder, architecture, _, _ = read_manylangs_folder(path)
        return encoder, architecture
    check_known_folder(path)
    if is_elmo_files_folder(path):
        encoder = load_bilm_encoder(path)
        architecture = architecture_from_options(
            read_options(os.path.join(path, OPTIONS_FILE)),
            cast(ElmoCharCnn, encoder.char_cnn).char_embedding.num_embeddings,  # an ELMo folder's
        )
    else:
        architecture = architecture_from_archive(path)
        encoder = load_bilm_encoder(path)
        if isinstance(encoder.char_cnn, ElmoManyLangsCnn):
            architecture = {**architecture, "token_embedder": encoder.char_cnn.architecture}
    # The loaded encoder carries the archive's dropouts; the one returned is rebuilt from the
    # dropout-free architecture, so it is exactly what a downstream archive that records this
    # architecture rebuilds (same modules, same state-dict keys), with the loaded weights.
    rebuilt = BiLmEncoder.from_architecture(architecture)
    try:
        rebuilt.load_state_dict(encoder.state_dict())
    except RuntimeError as error:
        raise ConfigurationError(
            f"{path}: its recorded architecture does not rebuild its biLM: {error}"
        ) from None
    if isinstance(encoder.char_cnn, ElmoManyLangsCnn):  # they are not weights: carried over
        cast(ElmoManyLangsCnn, rebuilt.char_cnn).dictionaries = encoder.char_cnn.dictionaries
    return rebuilt.eval(), architecture
