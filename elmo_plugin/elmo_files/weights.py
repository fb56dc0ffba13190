"""`weights.hdf5` <-> the weights of a `BiLmEncoder` (`ElmoCharCnn` + `elmo_lstm`), as pure
functions. The reference reader is allennlp's `_ElmoCharacterEncoder` / `ElmoLstm.load_weights`;
this module undoes (reading) and produces (writing) TensorFlow's conventions exactly as it
expects them:

- `char_embed` (261, E): row i is character id i + 1 (id 0 is padding, all zeros);
- `CNN/W_cnn_i` (1, width, E, count) <-> Conv1d weight (count, E, width);
- highway: `W_transform`/`W_carry` (F, F) are transposed, and the carry gate's weight and bias
  change sign (allennlp's gate multiplies the input, TensorFlow's the transform);
- LSTM: `W_0` (P + P, 4H) packs input and recurrent weights, gates in order i, j, f, o
  (torch: i, f, g, o), `B` (4H,) is stored without the +1.0 TensorFlow adds to the forget gate
  at run time, `W_P_0` (H, P) is the projection.
"""

import json
from collections.abc import Iterator
from typing import Any, Optional, cast

import numpy
import torch

from elmo_plugin.data.output_file import OutputFile
from elmo_plugin.elmo_files.layout import (
    ElmoFilesError,
    Hdf5Reader,
    copy_into,
    to_numpy,
    write_hdf5,
)
from elmo_plugin.elmo_files.options import (
    NUM_CHARACTERS,
    architecture_from_options,
    encoder_options,
    lstm_encoder_parts,
    read_options,
)
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer


def _lstm_dataset(direction: int, layer: int, name: str) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{name}"


def _swap_j_f(array: numpy.ndarray, cells: int) -> numpy.ndarray:
    """Gate blocks along axis 0: TensorFlow i, j, f, o <-> torch i, f, g(=j), o (an
    involution)."""
    return numpy.concatenate(
        [array[:cells], array[2 * cells : 3 * cells], array[cells : 2 * cells], array[3 * cells :]]
    )


def _forget_ones(cells: int) -> numpy.ndarray:
    """1.0 on torch's forget gate block (i, f, g, o), 0 elsewhere."""
    ones = numpy.zeros(4 * cells, numpy.float32)
    ones[cells : 2 * cells] = 1.0
    return ones


def _directions(lstm: ElmoLstmContextualizer) -> Iterator[tuple[int, int, torch.nn.LSTM]]:
    layers = zip(lstm.forward_layers, lstm.backward_layers, strict=True)
    for layer, (forward, backward) in enumerate(layers):
        yield 0, layer, cast(torch.nn.LSTM, forward)
        yield 1, layer, cast(torch.nn.LSTM, backward)


def load_weights(
    encoder: BiLmEncoder, weights_file: str, options_file: Optional[str] = None
) -> None:
    """Copies weights.hdf5 into an encoder whose architecture matches its options; a dataset
    the encoder has no place for is an error."""
    cnn, lstm = lstm_encoder_parts(encoder)  # or a clear error
    embedding_dim = cnn.char_embedding.embedding_dim
    num_filters = sum(count for _, count in cnn.filters)
    projection_dim, cells = lstm.input_dim, lstm.cell_size
    with Hdf5Reader(weights_file, "weights", options_file) as weights:
        char_embed = weights.read(
            "char_embed", (cnn.char_embedding.num_embeddings - 1, embedding_dim)
        )
        copy_into(
            cnn.char_embedding.weight,
            numpy.concatenate([numpy.zeros((1, embedding_dim), numpy.float32), char_embed]),
        )
        convolutions = zip(cnn.filters, cnn.conv_layers(), strict=True)
        for index, ((width, count), conv) in enumerate(convolutions):
            kernel = weights.read(f"CNN/W_cnn_{index}", (1, width, embedding_dim, count))
            copy_into(conv.weight, kernel[0].transpose(2, 1, 0))
            copy_into(conv.get_parameter("bias"), weights.read(f"CNN/b_cnn_{index}", (count,)))
        for index, highway in enumerate(cnn.highway_layers()):
            w_transform = weights.read(f"CNN_high_{index}/W_transform", (num_filters, num_filters))
            w_carry = weights.read(f"CNN_high_{index}/W_carry", (num_filters, num_filters))
            b_transform = weights.read(f"CNN_high_{index}/b_transform", (num_filters,))
            b_carry = weights.read(f"CNN_high_{index}/b_carry", (num_filters,))
            copy_into(highway.weight, numpy.concatenate([w_transform.T, -w_carry.T]))
            copy_into(highway.bias, numpy.concatenate([b_transform, -b_carry]))
        copy_into(
            cnn.projection.weight, weights.read("CNN_proj/W_proj", (num_filters, projection_dim)).T
        )
        copy_into(cnn.projection.bias, weights.read("CNN_proj/b_proj", (projection_dim,)))
        for direction, layer, cell in _directions(lstm):
            packed = weights.read(
                _lstm_dataset(direction, layer, "W_0"), (2 * projection_dim, 4 * cells)
            ).T
            bias = weights.read(_lstm_dataset(direction, layer, "B"), (4 * cells,))
            copy_into(
                cell.get_parameter("weight_ih_l0"), _swap_j_f(packed[:, :projection_dim], cells)
            )
            copy_into(
                cell.get_parameter("weight_hh_l0"), _swap_j_f(packed[:, projection_dim:], cells)
            )
            # The file's bias in bias_ih, TensorFlow's run-time +1.0 forget bias in bias_hh:
            # the LSTM adds them, and writing it back out is exact.
            copy_into(cell.get_parameter("bias_ih_l0"), _swap_j_f(bias, cells))
            copy_into(cell.get_parameter("bias_hh_l0"), _forget_ones(cells))
            copy_into(
                cell.get_parameter("weight_hr_l0"),
                weights.read(_lstm_dataset(direction, layer, "W_P_0"), (cells, projection_dim)).T,
            )
        weights.refuse_unread()


def read_bilm_files(options_file: str, weights_file: str) -> tuple[BiLmEncoder, Architecture]:
    """options.json + weights.hdf5 -> (a `BiLmEncoder` (ElmoCharCnn + ElmoLstm, no dropout, eval
    mode), its architecture)."""
    options = read_options(options_file)
    with Hdf5Reader(weights_file, "weights", options_file) as weights:
        shape = weights.shape("char_embed")
    dim = options["char_cnn"]["embedding"]["dim"]
    if len(shape) != 2 or shape[0] < NUM_CHARACTERS - 1 or shape[1] != dim:
        raise ElmoFilesError(
            f"{weights_file}: dataset char_embed has shape {shape} but {options_file} implies "
            f"({NUM_CHARACTERS - 1}, {dim})"
        )
    architecture = architecture_from_options(options, num_characters=shape[0] + 1)
    encoder = BiLmEncoder.from_architecture(architecture)
    load_weights(encoder, weights_file, options_file)
    return encoder.eval(), architecture


def read_bilm_encoder(options_file: str, weights_file: str) -> BiLmEncoder:
    """options.json + weights.hdf5 -> a `BiLmEncoder` (`read_bilm_files`)."""
    return read_bilm_files(options_file, weights_file)[0]


def weight_arrays(encoder: BiLmEncoder) -> dict[str, numpy.ndarray]:
    """Dataset name -> array of weights.hdf5 for one of our encoders."""
    cnn, lstm = lstm_encoder_parts(encoder)
    num_filters = sum(count for _, count in cnn.filters)
    arrays = {"char_embed": to_numpy(cnn.char_embedding.weight)[1:]}
    for index, conv in enumerate(cnn.conv_layers()):
        arrays[f"CNN/W_cnn_{index}"] = to_numpy(conv.weight).transpose(2, 1, 0)[None]
        arrays[f"CNN/b_cnn_{index}"] = to_numpy(conv.get_parameter("bias"))
    for index, highway in enumerate(cnn.highway_layers()):
        weight, bias = to_numpy(highway.weight), to_numpy(highway.bias)
        arrays[f"CNN_high_{index}/W_transform"] = weight[:num_filters].T
        arrays[f"CNN_high_{index}/W_carry"] = -weight[num_filters:].T
        arrays[f"CNN_high_{index}/b_transform"] = bias[:num_filters]
        arrays[f"CNN_high_{index}/b_carry"] = -bias[num_filters:]
    arrays["CNN_proj/W_proj"] = to_numpy(cnn.projection.weight).T
    arrays["CNN_proj/b_proj"] = to_numpy(cnn.projection.bias)
    cells = lstm.cell_size
    for direction, layer, cell in _directions(lstm):
        packed = numpy.concatenate(
            [
                _swap_j_f(to_numpy(cell.get_parameter("weight_ih_l0")), cells),
                _swap_j_f(to_numpy(cell.get_parameter("weight_hh_l0")), cells),
            ],
            axis=1,
        )
        # stored without TensorFlow's run-time +1.0 forget bias
        bias = _swap_j_f(
            to_numpy(cell.get_parameter("bias_ih_l0"))
            + (to_numpy(cell.get_parameter("bias_hh_l0")) - _forget_ones(cells)),
            cells,
        )
        arrays[_lstm_dataset(direction, layer, "W_0")] = packed.T
        arrays[_lstm_dataset(direction, layer, "B")] = bias
        arrays[_lstm_dataset(direction, layer, "W_P_0")] = to_numpy(
            cell.get_parameter("weight_hr_l0")
        ).T
    return arrays


def write_bilm_encoder(
    encoder: BiLmEncoder,
    options_file: str,
    weights_file: str,
    extra_options: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """Writes an LSTM encoder as options.json + weights.hdf5; returns the options written."""
    options = encoder_options(encoder)
    options.update(extra_options or {})
    write_hdf5(weights_file, weight_arrays(encoder))
    with OutputFile(options_file) as out:
        json.dump(options, out.file, indent=2)
        out.file.write("\n")
    return options
