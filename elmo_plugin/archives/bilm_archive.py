"""allennlp model archives of a biLM: our `elmo_bilm` or allennlp-models' bidirectional
`language_model` (`model.tar.gz` or serialization folder, path or URL): the model, its config,
and the biLM's encoder with its architecture.

A `model.tar.gz` is checked member by member and extracted by `safe_archive` (never by
allennlp's unfiltered `extracted_archive`), once per load (`model_folder`).
"""

import contextlib
import copy
import json
import os
import pickle
from collections.abc import Iterator
from typing import Any

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary
from allennlp.models import Model
from allennlp.models.archival import CONFIG_NAME, load_archive
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.archives.safe_archive import (
    VOCABULARY_NAME,
    WEIGHTS_NAMES,
    extracted_model_archive,
    require_model_folder,
)
from elmo_plugin.elmo_files.source import MODEL_ARCHIVE, resolve_bilm_source
from elmo_plugin.elmo_files.weights_only import without_unsafe_advice
from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder, current_architecture

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


@contextlib.contextmanager
def model_folder(path: str, name: str) -> Iterator[str]:
    """The folder of a local model archive `path` (`name`: as the user gave it): a
    serialization folder as it is, a `model.tar.gz` checked and extracted once (removed after).
    A load error inside is one line naming `name` and the archive's members, not the
    temporary folder."""
    with contextlib.ExitStack() as stack:
        if os.path.isdir(path):
            require_model_folder(path)
            folder = path
        else:
            folder = stack.enter_context(extracted_model_archive(path))
        try:
            yield folder
        except LOAD_ERRORS as error:
            if isinstance(error, ConfigurationError) and name in str(error):
                raise
            message = without_unsafe_advice(error)
            if folder != path:
                message = message.replace(os.path.join(folder, ""), "").replace(folder, ".")
            raise ConfigurationError(f"{name}: cannot load the model: {message}") from None


def folder_config(folder: str, name: str) -> dict[str, Any]:
    """config.json of a serialization folder or an extracted archive `name`; an error naming
    the archive when it is not JSON."""
    try:
        with open(os.path.join(folder, CONFIG_NAME), encoding="utf-8") as source:
            return json.load(source)
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"{name}: unreadable {CONFIG_NAME} ({error})") from None


def archived_state(folder: str) -> dict[str, torch.Tensor]:
    """The weights of a model folder (`weights.th`, else a serialization folder's `best.th`),
    read as tensors only."""
    name = next(n for n in WEIGHTS_NAMES if os.path.isfile(os.path.join(folder, n)))
    return torch.load(os.path.join(folder, name), map_location="cpu", weights_only=True)


def load_model_archive(archive_path: str, cuda_device: int = -1) -> Model:
    """The whole model of a `model.tar.gz` or serialization folder (allennlp's `load_archive`);
    an error naming what `archive_path` is when it is another kind of biLM source."""
    source = resolve_bilm_source(archive_path)
    if source.kind != MODEL_ARCHIVE:
        raise ConfigurationError(f"{archive_path} is {source.kind}, not a model archive")
    with model_folder(source.path, archive_path) as folder:
        return load_archive(folder, cuda_device=cuda_device).model


def load_bilm_model(archive_path: str, cuda_device: int = -1) -> ElmoLanguageModel:
    """Our `elmo_bilm` from a `model.tar.gz` or serialization folder, softmax included (what
    `elmo-export` writes); a clear error otherwise."""
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


def _character_encoder(model_config: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    """(key, params) of the one non-empty token embedder of a `language_model` config (the rule
    of `model_character_encoder`)."""
    embedders = model_config.get("text_field_embedder", {}).get("token_embedders", {})
    non_empty = [
        (key, params)
        for key, params in embedders.items()
        if isinstance(params, dict) and params.get("type") != "empty"
    ]
    if len(non_empty) != 1:
        raise ConfigurationError(
            f"{name}: a biLM needs exactly one non-empty token embedder, it has {len(non_empty)}"
        )
    return non_empty[0]


def configured_architecture(model_config: dict[str, Any], name: str) -> tuple[Architecture, str]:
    """(the biLM architecture a `model` config gives, dropouts 0, current keys; the key of its
    character encoder); a clear error for a model that is no bidirectional language model."""
    if "contextualizer" not in model_config or not _is_language_model(model_config.get("type")):
        raise ConfigurationError(
            f"{name} holds a {model_config.get('type', 'unknown')!r} model, {NOT_A_BILM}"
        )
    if model_config["type"] != "elmo_bilm" and not model_config.get("bidirectional", False):
        raise ConfigurationError(f"{name} {UNIDIRECTIONAL}")
    key, characters = _character_encoder(model_config, name)
    architecture = {
        "token_embedder": _without_dropout(characters),
        "contextualizer": _without_dropout(model_config["contextualizer"]),
    }
    return current_architecture(architecture), key


def encoder_state(state: dict[str, torch.Tensor], embedder_key: str) -> dict[str, torch.Tensor]:
    """A language model's state dict -> its encoder's (the softmax and the model's own buffers
    left out)."""
    prefixes = {
        f"_text_field_embedder.token_embedder_{embedder_key}.": "char_cnn.",
        "_contextualizer.": "contextualizer.",
    }
    return {
        new + key[len(old) :]: value
        for key, value in state.items()
        for old, new in prefixes.items()
        if key.startswith(old)
    }


def read_model_archive(path: str, name: str) -> tuple[BiLmEncoder, Architecture]:
    """A local archive file or serialization folder (`name`: as given) -> (its biLM encoder, no
    dropout, eval mode; its architecture). The encoder is built from the architecture its
    config records and its weights loaded strictly; its softmax is never built. The character
    encoder's architecture is its own (`CharacterEncoder`), or its configured params
    (allennlp-models' `character_encoding`)."""
    with model_folder(path, name) as folder:
        configured, key = configured_architecture(
            folder_config(folder, name).get("model", {}), name
        )
        vocab = Vocabulary.from_files(os.path.join(folder, VOCABULARY_NAME))
        encoder = BiLmEncoder.from_architecture(configured, vocab)
        weights = encoder_state(archived_state(folder), key)
        try:
            encoder.load_state_dict(weights)
        except RuntimeError as error:  # a key or shape that differs: one line
            raise ConfigurationError(
                f"{name}: its weights do not fit the biLM its config records: "
                + " ".join(str(error).split())
            ) from None
    architecture = {**configured, "token_embedder": encoder.characters.architecture}
    return encoder.eval(), architecture
