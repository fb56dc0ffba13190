"""A language model's starting weights (`elmo_bilm`'s `pretrained_file`): ELMo files, or an
ELMoForManyLangs model folder, read into the model's parts (its encoder and softmax matrices)."""

import logging
import os

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.elmo_files.layout import SOFTMAX_FILE
from elmo_plugin.elmo_files.manylangs import load_manylangs_folder
from elmo_plugin.elmo_files.options import check_architecture, read_options
from elmo_plugin.elmo_files.softmax import import_softmax
from elmo_plugin.elmo_files.source import (
    MANYLANGS,
    MODEL_ARCHIVE,
    SourceSpec,
    resolve_bilm_source,
)
from elmo_plugin.elmo_files.weights import load_weights
from elmo_plugin.modules.bilm_encoder import BiLmEncoder

logger = logging.getLogger(__name__)


def load_pretrained_files(
    given: SourceSpec,
    encoder: BiLmEncoder,
    softmax: tuple[torch.Tensor, torch.Tensor],
    token_to_index: dict[str, int],
) -> None:
    """Loads `given` into a model's `encoder` and `softmax` (weight (rows, P), bias (rows,),
    row r scoring vocabulary index r + 1; `token_to_index`: the softmax vocabulary). `given`:
    ELMo files (a folder or `[options, weights]`) or an ELMoForManyLangs folder
    (`elmo_files.source`). The encoder's architecture must equal the source's. Softmax rows
    are mapped by token through vocab.txt; without both files the softmax starts fresh, said in
    one warning."""
    source = resolve_bilm_source(given)
    if source.kind == MODEL_ARCHIVE:
        raise ConfigurationError(
            f"model.pretrained_file: {source.name} is a model archive; it takes ELMo files or an "
            "ELMoForManyLangs folder (`allennlp elmo-export` writes an elmo_bilm's ELMo files)"
        )
    if source.kind == MANYLANGS:
        load_manylangs_folder(source.path, encoder)
        if os.path.exists(os.path.join(source.path, "classifier.pkl")):
            missing = "softmax we import (its classifier.pkl is not)"
        else:
            missing = "softmax"
        warn_fresh_softmax(source.name, missing, len(token_to_index))
        logger.info("loaded the ELMoForManyLangs biLM of %s", source.name)
        return
    files = source.files
    assert files is not None  # ELMO_FILES
    check_architecture(encoder, read_options(files.options_file), files.options_file)
    load_weights(encoder, files.weights_file, files.options_file)
    if files.softmax_file is not None and files.vocab_file is not None:
        import_softmax(*softmax, token_to_index, files.softmax_file, files.vocab_file)
    else:
        missing = f"vocab.txt for its {SOFTMAX_FILE}" if files.softmax_file else SOFTMAX_FILE
        warn_fresh_softmax(files.name, missing, len(token_to_index))
    logger.info("loaded the biLM weights of %s", files.name)


def warn_fresh_softmax(source: str, missing: str, vocabulary_size: int) -> None:
    """The one warning of a softmax that starts from its initial values, and what to expect."""
    logger.warning(
        "%s has no %s: the softmax starts fresh (random): expect a training perplexity around "
        "the vocabulary size (%d) or above at first, falling fast while the softmax fits the "
        "pretrained layers; on a small corpus freeze the character CNN and lower LSTM layers "
        "(trainer.no_grad, elmo-continue --freeze) so its first gradients do not undo them",
        source,
        missing,
        vocabulary_size,
    )
