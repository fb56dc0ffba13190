"""One loader for a biLM: our `elmo_bilm` model archive, or a folder of ELMo files."""
import os

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import load_archive

from elmo_plugin.elmo_files.layout import OPTIONS_FILE, WEIGHTS_FILE
from elmo_plugin.elmo_files.weights import read_bilm_encoder
from elmo_plugin.models.elmo_bilm import ElmoLanguageModel
from elmo_plugin.modules.bilm_encoder import BiLmEncoder


def load_bilm_model(archive_path: str, cuda_device: int = -1) -> ElmoLanguageModel:
    """Our `elmo_bilm` from a `model.tar.gz` or serialization folder; a clear error otherwise."""
    model = load_archive(archive_path, cuda_device=cuda_device).model
    if not isinstance(model, ElmoLanguageModel):
        raise ConfigurationError(
            f"{archive_path} holds a {type(model).__name__} model, not an ELMo biLM (elmo_bilm)"
        )
    return model


def is_elmo_files_folder(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, OPTIONS_FILE))


def load_bilm_encoder(path: str, cuda_device: int = -1) -> BiLmEncoder:
    """`path`: our archive (LSTM or transformer) or a folder with options.json + weights.hdf5."""
    if is_elmo_files_folder(path):
        encoder = read_bilm_encoder(os.path.join(path, OPTIONS_FILE), os.path.join(path, WEIGHTS_FILE))
        return encoder.to(f"cuda:{cuda_device}") if cuda_device >= 0 else encoder
    return load_bilm_model(path, cuda_device).bilm_encoder()
