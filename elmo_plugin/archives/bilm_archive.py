"""One loader for a biLM: our `elmo_bilm` model archive, allennlp-models' bidirectional
`language_model` archive, or a folder of ELMo files.

A `model.tar.gz` is checked member by member and extracted by `safe_archive` (never by
allennlp's unfiltered `extracted_archive`); allennlp's `load_archive` then reads the folder.
"""

import os
import pickle

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.models import Model
from allennlp.models.archival import CONFIG_NAME, load_archive
from allennlp.modules.token_embedders import EmptyEmbedder, TokenEmbedder
from allennlp_models.lm.models.language_model import LanguageModel

from elmo_plugin.archives.safe_archive import extracted_model_archive, require_model_folder
from elmo_plugin.data.elmo_manylangs_files import FOLDER_FILES as MANYLANGS_FILES
from elmo_plugin.data.elmo_manylangs_files import is_manylangs_folder
from elmo_plugin.elmo_files.layout import OPTIONS_FILE, WEIGHTS_FILE
from elmo_plugin.elmo_files.manylangs import read_manylangs_folder
from elmo_plugin.elmo_files.weights import read_bilm_encoder
from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.modules.bilm_encoder import BiLmEncoder

# What allennlp's loading raises for a damaged config or weights file (torch.load's
# weights-only refusal is an UnpicklingError).
LOAD_ERRORS = (
    ConfigurationError,
    RuntimeError,
    ValueError,
    KeyError,
    EOFError,
    pickle.UnpicklingError,
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


def load_model_archive(archive_path: str, cuda_device: int = -1) -> Model:
    """The model of a `model.tar.gz` (checked, then extracted safely) or serialization folder."""
    path = local_archive(archive_path)
    try:
        if os.path.isdir(path):
            require_model_folder(path)
            return load_archive(path, cuda_device=cuda_device).model
        with extracted_model_archive(path) as folder:
            return load_archive(folder, cuda_device=cuda_device).model
    except LOAD_ERRORS as error:
        if isinstance(error, ConfigurationError) and archive_path in str(error):
            raise
        raise ConfigurationError(f"{archive_path}: cannot load the model: {error}") from None


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
        raise ConfigurationError(
            f"{source} holds a {type(model).__name__} model, not an ELMo biLM (elmo_bilm, or "
            "allennlp-models' language_model with bidirectional: true)"
        )
    if not model._bidirectional:
        raise ConfigurationError(
            f"{source} holds a unidirectional language_model (bidirectional: false): ELMo needs "
            "a forward and a backward language model (bidirectional: true)"
        )
    return model


def load_language_model(archive_path: str, cuda_device: int = -1) -> LanguageModel:
    """Our `elmo_bilm` or allennlp-models' bidirectional `language_model` from an archive."""
    return check_bidirectional_language_model(
        load_model_archive(archive_path, cuda_device), archive_path
    )


def character_encoder(model: LanguageModel) -> TokenEmbedder:
    """The one non-empty token embedder of a language model (as allennlp-models' embedder finds
    it)."""
    token_embedders = model._text_field_embedder._token_embedders
    embedders = [
        embedder for embedder in token_embedders.values() if not isinstance(embedder, EmptyEmbedder)
    ]
    if len(embedders) != 1:
        raise ConfigurationError(
            f"a biLM needs exactly one non-empty token embedder, this one has {len(embedders)}"
        )
    return embedders[0]


def language_model_encoder(model: LanguageModel) -> BiLmEncoder:
    """The character encoder and contextualizer of a bidirectional language model (shared, not
    copied; allennlp-models' contextualizer is switched to return every layer)."""
    if isinstance(model, ElmoLanguageModel):
        return model.bilm_encoder()
    return BiLmEncoder(character_encoder(model), model._contextualizer)


def is_elmo_files_folder(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, OPTIONS_FILE))


def check_known_folder(path: str) -> None:
    """A clear error for a folder that is none of the three kinds a biLM can come in."""
    if os.path.isdir(path) and not (
        is_elmo_files_folder(path)
        or is_manylangs_folder(path)
        or os.path.isfile(os.path.join(path, CONFIG_NAME))
    ):
        raise ConfigurationError(
            f"{path}: neither a model archive folder ({CONFIG_NAME}), nor an ELMo files folder "
            f"({OPTIONS_FILE} + {WEIGHTS_FILE}), nor an ELMoForManyLangs model folder "
            f"({', '.join(MANYLANGS_FILES)})"
        )


def load_bilm_encoder(path: str, cuda_device: int = -1) -> BiLmEncoder:
    """`path`: our archive (LSTM or transformer), allennlp-models' bidirectional `language_model`
    archive, a folder with options.json + weights.hdf5, or an ELMoForManyLangs model folder."""
    check_known_folder(path)
    if is_manylangs_folder(path):
        encoder = read_manylangs_folder(path)[0]
    elif is_elmo_files_folder(path):
        encoder = read_bilm_encoder(
            os.path.join(path, OPTIONS_FILE), os.path.join(path, WEIGHTS_FILE)
        )
    else:
        return language_model_encoder(load_language_model(path, cuda_device))
    return encoder.to(f"cuda:{cuda_device}") if cuda_device >= 0 else encoder
