"""allennlp model archives of a biLM: our `elmo_bilm` or allennlp-models' bidirectional
`language_model` (`model.tar.gz` or serialization folder, path or URL): the model, its config,
and the biLM's encoder with its architecture.

A `model.tar.gz` is checked member by member and extracted by `safe_archive` (never by
allennlp's unfiltered `extracted_archive`); allennlp's `load_archive` then reads the folder.
"""

import copy
import json
import os
import pickle
import tarfile
from typing import Any

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.data import Vocabulary
from allennlp.models import Model
from allennlp.models.archival import CONFIG_NAME, load_archive
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.archives.safe_archive import (
    checked_members,
    extracted_model_archive,
    open_archive,
    require_model_folder,
)
from elmo_plugin.data.elmo_manylangs_indexer import DEFAULT_NAMESPACE
from elmo_plugin.elmo_files.weights_only import without_unsafe_advice
from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.models.language_model_encoder import language_model_encoder
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder, current_architecture
from elmo_plugin.modules.character_encoder import character_encoder, record_indexer_dictionaries

# What allennlp's loading raises for a damaged or missing config, weights or vocabulary file
# (torch.load's weights-only refusal is an UnpicklingError).
LOAD_ERRORS = (
    ConfigurationError,
    RuntimeError,
    ValueError,
    KeyError,
    EOFError,
    OSError,
    pickle.UnpicklingError,
)
NOT_A_BILM = (
    "not an ELMo biLM (elmo_bilm, or allennlp-models' language_model with bidirectional: true)"
)
UNIDIRECTIONAL = (
    "holds a unidirectional language_model (bidirectional: false): ELMo needs a forward and a "
    "backward language model (bidirectional: true)"
)


def local_archive(archive_path: str) -> str:
    """A local file or folder as it is; a URL downloaded to allennlp's cache (as `load_archive`
    does); an error naming the path when it is neither."""
    if os.path.exists(archive_path):
        return archive_path
    try:
        return cached_path(archive_path)
    except (OSError, ValueError):
        raise ConfigurationError(
            f"biLM archive or ELMo files folder not found: {archive_path}"
        ) from None


def folder_config(folder: str, archive_path: str) -> dict[str, Any]:
    """config.json of a serialization folder or an extracted `archive_path`; an error naming the
    archive when it is not JSON."""
    try:
        with open(os.path.join(folder, CONFIG_NAME), encoding="utf-8") as source:
            return json.load(source)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"{archive_path}: unreadable {CONFIG_NAME} ({error})") from None


def archive_config(archive_path: str) -> dict[str, Any]:
    """config.json of a model.tar.gz (its members checked first, nothing extracted) or
    serialization folder, without loading the model."""
    path = local_archive(archive_path)
    if os.path.isdir(path):
        require_model_folder(path)
        return folder_config(path, archive_path)
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


def load_model_archive(archive_path: str, cuda_device: int = -1) -> Model:
    """The model of a `model.tar.gz` (checked, then extracted safely) or serialization folder."""
    path = local_archive(archive_path)
    try:
        if os.path.isdir(path):
            require_model_folder(path)
            return load_archive(path, cuda_device=cuda_device).model
        with extracted_model_archive(path) as folder:
            return load_extracted_archive(folder, cuda_device)
    except LOAD_ERRORS as error:
        if isinstance(error, ConfigurationError) and archive_path in str(error):
            raise
        raise ConfigurationError(
            f"{archive_path}: cannot load the model: {without_unsafe_advice(error)}"
        ) from None


def load_extracted_archive(folder: str, cuda_device: int) -> Model:
    """allennlp's `load_archive` of an extracted archive's temporary `folder`; its errors name
    the files as the archive's members (`vocabulary/tokens.txt`), not as paths in `folder`."""
    try:
        return load_archive(folder, cuda_device=cuda_device).model
    except LOAD_ERRORS as error:
        message = without_unsafe_advice(error)
        message = message.replace(os.path.join(folder, ""), "").replace(folder, ".")
        raise ConfigurationError(message) from None


def load_bilm_model(archive_path: str, cuda_device: int = -1) -> ElmoLanguageModel:
    """Our `elmo_bilm` from a `model.tar.gz` or serialization folder; a clear error otherwise."""
    model = load_model_archive(archive_path, cuda_device)
    if not isinstance(model, ElmoLanguageModel):
        raise ConfigurationError(
            f"{archive_path} holds a {type(model).__name__} model, not an ELMo biLM (elmo_bilm)"
        )
    return model


def check_bidirectional_language_model(model, source: str) -> LanguageModel:
    """`model` if it is ours or allennlp-models' bidirectional `LanguageModel`; a clear error
    otherwise."""
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(f"{source} holds a {type(model).__name__} model, {NOT_A_BILM}")
    if not model._bidirectional:
        raise ConfigurationError(f"{source} {UNIDIRECTIONAL}")
    return model


def load_language_model(archive_path: str, cuda_device: int = -1) -> LanguageModel:
    """Our `elmo_bilm` or allennlp-models' bidirectional `language_model` from an archive."""
    return check_bidirectional_language_model(
        load_model_archive(archive_path, cuda_device), archive_path
    )


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


def _character_encoder_params(model_config: dict[str, Any], archive_path: str) -> dict[str, Any]:
    """The one non-empty token embedder's params of a `language_model` config (the rule of
    `model_character_encoder`)."""
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


def configured_architecture(archive_path: str) -> Architecture:
    """The biLM architecture its config.json gives, dropouts 0, current keys; a clear error for
    an archive that holds no bidirectional language model (checked before any weight loads)."""
    model = archive_config(archive_path).get("model", {})
    if "contextualizer" not in model or not _is_language_model(model.get("type")):
        raise ConfigurationError(
            f"{archive_path} holds a {model.get('type', 'unknown')!r} model, {NOT_A_BILM}"
        )
    if model["type"] != "elmo_bilm" and not model.get("bidirectional", False):
        raise ConfigurationError(f"{archive_path} {UNIDIRECTIONAL}")
    return current_architecture(
        {
            "token_embedder": _without_dropout(_character_encoder_params(model, archive_path)),
            "contextualizer": _without_dropout(model["contextualizer"]),
        }
    )


def read_model_archive(archive_path: str) -> tuple[BiLmEncoder, Architecture]:
    """An archive -> (its biLM encoder with the archived weights, no dropout, eval mode; its
    architecture). The character encoder's architecture is its own (`CharacterEncoder`), or its
    configured params (allennlp-models' `character_encoding`); the contextualizer's its config's.
    The encoder is rebuilt from that architecture, so it is exactly what a downstream archive
    that records it rebuilds (same modules, same state-dict keys)."""
    configured = configured_architecture(archive_path)
    loaded = language_model_encoder(load_language_model(archive_path))
    characters = character_encoder(loaded.char_cnn, configured["token_embedder"])
    architecture = {**configured, "token_embedder": characters.architecture}
    return rebuilt(loaded, architecture, archive_path), architecture


def rebuilt(encoder: BiLmEncoder, architecture: Architecture, source: str) -> BiLmEncoder:
    """A new encoder of `architecture` with `encoder`'s weights and what its character encoder
    reads from a vocabulary (`indexer_dictionaries`), in eval mode."""
    dictionaries = Vocabulary()
    record_indexer_dictionaries(dictionaries, DEFAULT_NAMESPACE, encoder.characters, source)
    new = BiLmEncoder.from_architecture(architecture, dictionaries)
    try:
        new.load_state_dict(encoder.state_dict())
    except RuntimeError as error:
        raise ConfigurationError(
            f"{source}: its recorded architecture does not rebuild its biLM: {error}"
        ) from None
    return new.eval()
