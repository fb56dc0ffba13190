"""`softmax.hdf5` (`weight` (V, P), `bias` (V,)) + `vocab.txt` (line i = softmax row i) <-> a
language model's softmax, given as (weight (rows, P), bias (rows,)) tensors whose row r scores
vocabulary index r + 1 (index 0 is padding), as allennlp-models' `LanguageModel` lays it out."""

import logging

import numpy
import torch

from elmo_plugin.data.elmo_vocab_file import (
    published_tokens,
    read_elmo_vocab_file,
    write_elmo_vocab_file,
)
from elmo_plugin.elmo_files.layout import ElmoFilesError, Hdf5Reader, to_numpy, write_hdf5

logger = logging.getLogger(__name__)

# A logit this low has probability exactly 0 in float32 and gets no gradient.
NO_TOKEN_BIAS = -1.0e4


def read_softmax(softmax_file: str, rows: int, dim: int) -> tuple[numpy.ndarray, numpy.ndarray]:
    """softmax.hdf5 -> (weight (rows, dim), bias (rows,)), checked."""
    with Hdf5Reader(softmax_file, "softmax") as softmax:
        return softmax.read("weight", (rows, dim)), softmax.read("bias", (rows,))


def export_softmax(
    weight: torch.Tensor, bias: torch.Tensor, tokens: list[str], softmax_file: str, vocab_file: str
) -> None:
    """The rows of `tokens` (vocabulary indices 1..len(tokens)) -> softmax.hdf5 + vocab.txt."""
    write_hdf5(
        softmax_file,
        {"weight": to_numpy(weight)[: len(tokens)], "bias": to_numpy(bias)[: len(tokens)]},
    )
    write_elmo_vocab_file(vocab_file, published_tokens(tokens))


def import_softmax(
    weight: torch.Tensor,
    bias: torch.Tensor,
    token_to_index: dict[str, int],
    softmax_file: str,
    vocab_file: str,
) -> None:
    """softmax.hdf5 + vocab.txt -> `weight` and `bias` in place, row by token: the file's row for
    token t goes to the row of t's vocabulary index (`token_to_index`, 0 = padding). Tokens the
    file lacks keep their initial values (logged); rows past the vocabulary, which score no
    token, get probability 0, so the result's distribution is the file's over its vocabulary."""
    tokens = read_elmo_vocab_file(vocab_file)
    file_weight, file_bias = read_softmax(softmax_file, len(tokens), weight.size(1))
    file_rows, model_rows = [], []
    for row, token in enumerate(tokens):
        index = token_to_index.get(token)
        if index is not None and index > 0:
            file_rows.append(row)
            model_rows.append(index - 1)
    if not file_rows:
        raise ElmoFilesError(f"{vocab_file}: no token of it is in the model's vocabulary")
    vocabulary_rows = len(token_to_index) - 1  # without padding
    missing = vocabulary_rows - len(set(model_rows))
    if missing > 0 or len(file_rows) < len(tokens):
        logger.warning(
            "%s: %d of the model's %d tokens have no softmax row in it (initialized randomly); "
            "%d of its %d rows are not in the model's vocabulary (dropped)",
            softmax_file,
            missing,
            vocabulary_rows,
            len(tokens) - len(file_rows),
            len(tokens),
        )
    with torch.no_grad():
        rows = torch.tensor(model_rows, dtype=torch.long, device=weight.device)
        weight.index_copy_(0, rows, torch.from_numpy(file_weight[file_rows]).to(weight))
        bias.index_copy_(0, rows, torch.from_numpy(file_bias[file_rows]).to(bias))
        if vocabulary_rows < weight.size(0):
            weight[vocabulary_rows:] = 0.0
            bias[vocabulary_rows:] = NO_TOKEN_BIAS
