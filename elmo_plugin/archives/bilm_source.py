"""A biLM from any source, one loader per kind (`elmo_files.source.resolve_bilm_source` decides
the kind). Each returns the encoder (its weights, no dropout, eval mode) and its architecture
(`modules.bilm_encoder.Architecture`). An encoder can then be rebuilt without weights wherever
only the dict travels, e.g. inside a downstream model's archive.
"""

from allennlp.common.checks import check_for_gpu

from elmo_plugin.archives.bilm_archive import read_model_archive
from elmo_plugin.elmo_files.manylangs import read_manylangs_folder
from elmo_plugin.elmo_files.source import ELMO_FILES, MANYLANGS, SourceSpec, resolve_bilm_source
from elmo_plugin.elmo_files.weights import read_bilm_files
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder


def load_encoder_and_architecture(given: SourceSpec) -> tuple[BiLmEncoder, Architecture]:
    """Any biLM source -> (encoder with its weights, no dropout, eval mode; its architecture)."""
    source = resolve_bilm_source(given)
    if source.kind == ELMO_FILES and source.files is not None:
        return read_bilm_files(source.files.options_file, source.files.weights_file)
    if source.kind == MANYLANGS:
        return read_manylangs_folder(source.path)
    return read_model_archive(source.path, source.name)


def load_bilm_encoder(path: str, cuda_device: int = -1) -> BiLmEncoder:
    """`load_encoder_and_architecture`'s encoder, on GPU `cuda_device` (-1: the CPU); a
    ConfigurationError before loading when torch sees no such GPU."""
    check_for_gpu(cuda_device)
    encoder = load_encoder_and_architecture(path)[0]
    return encoder.to(f"cuda:{cuda_device}") if cuda_device >= 0 else encoder
