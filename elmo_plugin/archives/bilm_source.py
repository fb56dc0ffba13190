"""Where a biLM comes from, decided once: a model archive (our `elmo_bilm` or allennlp-models'
bidirectional `language_model`: `model.tar.gz`, serialization folder or URL), a folder of ELMo
files (one `*options.json` + one `*weights.hdf5`, any names), or an ELMoForManyLangs model
folder. One loader per kind returns the encoder (its weights, no dropout, eval mode) and its
architecture (`modules.bilm_encoder.Architecture`), so an encoder can be rebuilt without weights
wherever only the dict travels, e.g. inside a downstream model's archive.
"""

import os

from allennlp.common.checks import ConfigurationError, check_for_gpu
from allennlp.models.archival import CONFIG_NAME

from elmo_plugin.archives.bilm_archive import read_model_archive
from elmo_plugin.data.elmo_manylangs_files import FOLDER_FILES as MANYLANGS_FILES
from elmo_plugin.data.elmo_manylangs_files import is_manylangs_folder
from elmo_plugin.elmo_files.manylangs import read_manylangs_folder
from elmo_plugin.elmo_files.source import OPTIONS_SUFFIX, WEIGHTS_SUFFIX, resolve_folder
from elmo_plugin.elmo_files.weights import read_bilm_files
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder

MODEL_ARCHIVE = f"a model archive folder ({CONFIG_NAME})"
ELMO_FILES = f"an ELMo files folder (*{OPTIONS_SUFFIX} + *{WEIGHTS_SUFFIX})"
MANYLANGS = f"an ELMoForManyLangs model folder ({', '.join(MANYLANGS_FILES)})"
SHOWN_FILES = 10  # file names an error lists at most


def folder_marks(folder: str) -> dict[str, list[str]]:
    """Each kind of biLM folder -> the files in `folder` that mark it (empty lists left out)."""
    names = sorted(name for name in os.listdir(folder) if not name.startswith("."))
    elmo = [name for name in names if name.endswith((OPTIONS_SUFFIX, WEIGHTS_SUFFIX))]
    marks = {ELMO_FILES: elmo}
    if is_manylangs_folder(folder):  # its config.json is not an archive's
        marks[MANYLANGS] = [name for name in MANYLANGS_FILES if name in names]
    elif CONFIG_NAME in names:
        marks[MODEL_ARCHIVE] = [CONFIG_NAME]
    return {kind: found for kind, found in marks.items() if found}


def shown(names: list[str]) -> str:
    if not names:
        return "nothing"
    more = f" and {len(names) - SHOWN_FILES} more" if len(names) > SHOWN_FILES else ""
    return ", ".join(names[:SHOWN_FILES]) + more


def source_kind(path: str) -> str:
    """MODEL_ARCHIVE (anything but a folder: a `model.tar.gz`, a URL, or a path that the archive
    loader reports missing), ELMO_FILES or MANYLANGS; a one-line error naming the folder and
    what it holds when it is of no kind, or of more than one."""
    if not os.path.isdir(path):
        return MODEL_ARCHIVE
    marks = folder_marks(path)
    if len(marks) == 1:
        return next(iter(marks))
    if not marks:
        names = sorted(name for name in os.listdir(path) if not name.startswith("."))
        raise ConfigurationError(
            f"{path}: neither {MODEL_ARCHIVE}, nor {ELMO_FILES}, nor {MANYLANGS}; it holds "
            f"{shown(names)}"
        )
    raise ConfigurationError(
        f"{path}: holds the files of more than one kind of biLM folder: "
        + "; ".join(f"{kind}: {shown(found)}" for kind, found in marks.items())
        + "; give a folder of one kind"
    )


def read_elmo_files_folder(folder: str) -> tuple[BiLmEncoder, Architecture]:
    files = resolve_folder(folder)
    return read_bilm_files(files.options_file, files.weights_file)


def load_encoder_and_architecture(path: str) -> tuple[BiLmEncoder, Architecture]:
    """Any biLM source (see the module) -> (encoder with its weights, no dropout, eval mode; its
    architecture)."""
    kind = source_kind(path)
    if kind == ELMO_FILES:
        return read_elmo_files_folder(path)
    if kind == MANYLANGS:
        return read_manylangs_folder(path)
    return read_model_archive(path)


def load_bilm_encoder(path: str, cuda_device: int = -1) -> BiLmEncoder:
    """`load_encoder_and_architecture`'s encoder, on GPU `cuda_device` (-1: the CPU); a
    ConfigurationError before loading when torch sees no such GPU."""
    check_for_gpu(cuda_device)
    encoder = load_encoder_and_architecture(path)[0]
    return encoder.to(f"cuda:{cuda_device}") if cuda_device >= 0 else encoder
