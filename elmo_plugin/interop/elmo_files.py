"""The standard ELMo files <-> our modules, as pure functions.

`options.json` + `weights.hdf5` <-> a `BiLmEncoder` (`ElmoCharCnn` + `ElmoLstm`), and
`softmax.hdf5` (`weight` (V, P), `bias` (V,)) + `vocab.txt` (line i = softmax row i) <-> the softmax
of allennlp-models' `LanguageModel`. The reference reader is allennlp's `_ElmoCharacterEncoder` /
`ElmoLstm.load_weights`; this module undoes (reading) and produces (writing) TensorFlow's
conventions exactly as it expects them:

- `char_embed` (261, E): row i is character id i + 1 (id 0 is padding, all zeros);
- `CNN/W_cnn_i` (1, width, E, count) <-> Conv1d weight (count, E, width);
- highway: `W_transform`/`W_carry` (F, F) are transposed, and the carry gate's weight and bias
  change sign (allennlp's gate multiplies the input, TensorFlow's the transform);
- LSTM: `W_0` (P + P, 4H) packs input and recurrent weights, gates in order i, j, f, o
  (torch: i, f, g, o), `B` (4H,) is stored without the +1.0 TensorFlow adds to the forget gate
  at run time, `W_P_0` (H, P) is the projection.

Every read is validated: a missing file names the path, an unreadable (truncated / corrupt)
HDF5 file names the file, a dataset whose shape does not match options.json names the file,
the dataset and both shapes, and NaN / inf values name the file and the dataset.
"""
import json
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import h5py
import numpy
import torch
from allennlp.common.checks import ConfigurationError
from allennlp.modules.softmax_loss import SoftmaxLoss

from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ACTIVATIONS, ElmoCharCnn
from elmo_plugin.modules.elmo_lstm import ElmoLstm

logger = logging.getLogger(__name__)

OPTIONS_FILE, WEIGHTS_FILE = "options.json", "weights.hdf5"
SOFTMAX_FILE, VOCAB_FILE = "softmax.hdf5", "vocab.txt"
MAX_CHARACTERS_PER_TOKEN = 50
NUM_CHARACTERS = 262
# allennlp's vocabulary calls the unknown word @@UNKNOWN@@; published ELMo vocabularies <UNK>.
PUBLISHED_UNKNOWN = "<UNK>"


class ElmoFilesError(ConfigurationError):
    """A problem with a standard ELMo file: the message names the file (and dataset)."""


# ----------------------------------------------------------------------------------------------
# options.json
# ----------------------------------------------------------------------------------------------


def _require_file(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise ElmoFilesError(f"ELMo {what} file not found: {path}")


def _option(options: Dict[str, Any], section: str, key: str, options_file: str) -> Any:
    try:
        return options[section][key]
    except (KeyError, TypeError):
        raise ElmoFilesError(f"{options_file}: missing option {section}.{key}") from None


def read_options(options_file: str) -> Dict[str, Any]:
    """options.json -> dict, checked for everything our modules (and allennlp) need."""
    _require_file(options_file, "options")
    try:
        with open(options_file, encoding="utf-8") as source:
            options = json.load(source)
    except (ValueError, UnicodeDecodeError) as error:
        raise ElmoFilesError(f"{options_file}: not valid JSON ({error})") from None
    for section, key in [
        ("lstm", "projection_dim"), ("lstm", "dim"), ("lstm", "n_layers"),
        ("char_cnn", "filters"), ("char_cnn", "n_highway"), ("char_cnn", "embedding"),
    ]:
        _option(options, section, key, options_file)
    if not isinstance(options["char_cnn"]["embedding"], dict) or "dim" not in options["char_cnn"]["embedding"]:
        raise ElmoFilesError(f"{options_file}: missing option char_cnn.embedding.dim")
    if not options["lstm"].get("use_skip_connections"):
        raise ElmoFilesError(
            f"{options_file}: lstm.use_skip_connections must be true (ELMo's residual connections; "
            "allennlp's reader supports nothing else)"
        )
    activation = options["char_cnn"].get("activation", "relu")
    if activation not in ACTIVATIONS:
        raise ElmoFilesError(f"{options_file}: char_cnn.activation {activation!r} is not one of {list(ACTIVATIONS)}")
    max_chars = options["char_cnn"].get("max_characters_per_token", MAX_CHARACTERS_PER_TOKEN)
    if max_chars != MAX_CHARACTERS_PER_TOKEN:
        raise ElmoFilesError(
            f"{options_file}: char_cnn.max_characters_per_token is {max_chars}; ELMo's character ids "
            f"are {MAX_CHARACTERS_PER_TOKEN} per token"
        )
    return options


def _clip(value: Optional[float]) -> Optional[float]:
    """allennlp treats a missing, null or 0 clip as no clipping (`if clip_value:`)."""
    return float(value) if value else None


def char_cnn_kwargs(options: Dict[str, Any], num_characters: int = NUM_CHARACTERS) -> Dict[str, Any]:
    """`ElmoCharCnn` constructor arguments for an options dict."""
    cnn = options["char_cnn"]
    return {
        "filters": [[int(width), int(count)] for width, count in cnn["filters"]],
        "num_highway": int(cnn["n_highway"]),
        "projection_dim": int(options["lstm"]["projection_dim"]),
        "embedding_dim": int(cnn["embedding"]["dim"]),
        "activation": cnn.get("activation", "relu"),
        "num_characters": int(num_characters),
    }


def lstm_params(options: Dict[str, Any]) -> Dict[str, Any]:
    """Registered `elmo_lstm` contextualizer parameters (with `type`) for an options dict."""
    lstm = options["lstm"]
    return {
        "type": "elmo_lstm",
        "input_dim": int(lstm["projection_dim"]),
        "hidden_dim": int(lstm["dim"]),
        "num_layers": int(lstm["n_layers"]),
        "cell_clip": _clip(lstm.get("cell_clip")),
        "proj_clip": _clip(lstm.get("proj_clip")),
    }


def build_bilm_encoder(options: Dict[str, Any], num_characters: int = NUM_CHARACTERS) -> BiLmEncoder:
    """A randomly initialized encoder with the architecture of an options dict."""
    contextualizer = dict(lstm_params(options))
    contextualizer.pop("type")
    return BiLmEncoder(ElmoCharCnn(**char_cnn_kwargs(options, num_characters)), ElmoLstm(**contextualizer))


def encoder_options(encoder: BiLmEncoder) -> Dict[str, Any]:
    """The options.json dict of one of our encoders; an error for anything but an `ElmoLstm`."""
    lstm = encoder.contextualizer
    if not isinstance(lstm, ElmoLstm):
        raise ConfigurationError(
            f"the standard ELMo files (options.json + weights.hdf5) describe only LSTM biLMs; this "
            f"model's contextualizer is a {type(lstm).__name__}, which the standard layout has no "
            "place for (use the model.tar.gz archive itself instead)"
        )
    cnn = encoder.char_cnn
    return {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": lstm.input_dim,
            "cell_clip": lstm.cell_clip,
            "proj_clip": lstm.proj_clip,
            "dim": lstm.hidden_dim,
            "n_layers": lstm.num_layers,
        },
        "char_cnn": {
            "activation": cnn.activation,
            "filters": [[width, count] for width, count in cnn.filters],
            "n_highway": len(cnn.highways._layers),
            "embedding": {"dim": cnn.char_embedding.embedding_dim},
            "n_characters": cnn.char_embedding.num_embeddings,
            "max_characters_per_token": MAX_CHARACTERS_PER_TOKEN,
        },
    }


ARCHITECTURE_KEYS = [
    ("char_cnn", "activation"), ("char_cnn", "filters"), ("char_cnn", "n_highway"),
    ("lstm", "projection_dim"), ("lstm", "dim"), ("lstm", "n_layers"),
    ("lstm", "cell_clip"), ("lstm", "proj_clip"),
]


def check_architecture(encoder: BiLmEncoder, options: Dict[str, Any], options_file: str) -> None:
    """An error listing every architecture option where the encoder (the config) and the
    options file differ."""
    ours = encoder_options(encoder)
    theirs = {"char_cnn": dict(options["char_cnn"]), "lstm": dict(options["lstm"])}
    theirs["char_cnn"].setdefault("activation", "relu")
    theirs["char_cnn"]["filters"] = [[int(w), int(c)] for w, c in theirs["char_cnn"]["filters"]]
    theirs["lstm"]["cell_clip"] = _clip(theirs["lstm"].get("cell_clip"))
    theirs["lstm"]["proj_clip"] = _clip(theirs["lstm"].get("proj_clip"))
    differences = [
        f"{section}.{key}: config {ours[section][key]!r} vs options file {theirs[section][key]!r}"
        for section, key in ARCHITECTURE_KEYS
        if ours[section][key] != theirs[section][key]
    ]
    if ours["char_cnn"]["embedding"]["dim"] != options["char_cnn"]["embedding"]["dim"]:
        differences.append(
            f"char_cnn.embedding.dim: config {ours['char_cnn']['embedding']['dim']} vs options file "
            f"{options['char_cnn']['embedding']['dim']}"
        )
    if differences:
        raise ElmoFilesError(
            f"the configured biLM does not match {options_file}: " + "; ".join(differences)
        )


# ----------------------------------------------------------------------------------------------
# HDF5 helpers
# ----------------------------------------------------------------------------------------------


class _Hdf5Reader:
    """Reads float datasets from one HDF5 file with shape and finiteness checks."""

    def __init__(self, path: str, what: str, options_file: Optional[str] = None) -> None:
        _require_file(path, what)
        self.path = path
        self._against = f"{options_file} implies" if options_file else "expected"
        try:
            self._file = h5py.File(path, "r")
        except OSError as error:
            raise ElmoFilesError(f"{path}: cannot open as HDF5 (truncated or corrupt file?): {error}") from None

    def __enter__(self) -> "_Hdf5Reader":
        return self

    def __exit__(self, *exc_info) -> None:
        self._file.close()

    def shape(self, name: str) -> Tuple[int, ...]:
        try:
            if name not in self._file:
                raise ElmoFilesError(f"{self.path}: dataset {name} is missing")
            return tuple(self._file[name].shape)
        except (OSError, RuntimeError, KeyError) as error:
            raise ElmoFilesError(f"{self.path}: cannot read dataset {name} (truncated or corrupt file?): {error}") from None

    def read(self, name: str, expected_shape: Tuple[int, ...]) -> numpy.ndarray:
        shape = self.shape(name)
        if shape != tuple(expected_shape):
            raise ElmoFilesError(
                f"{self.path}: dataset {name} has shape {shape} but {self._against} {tuple(expected_shape)}"
            )
        try:
            array = numpy.asarray(self._file[name][...], dtype=numpy.float32)
        except (OSError, RuntimeError, ValueError, TypeError) as error:
            raise ElmoFilesError(f"{self.path}: cannot read dataset {name} (truncated or corrupt file?): {error}") from None
        bad = int(array.size - numpy.isfinite(array).sum())
        if bad:
            raise ElmoFilesError(f"{self.path}: dataset {name} holds {bad} NaN or inf values")
        return array


def _finite(name: str, array: numpy.ndarray, path: str) -> numpy.ndarray:
    bad = int(array.size - numpy.isfinite(array).sum())
    if bad:
        raise ElmoFilesError(f"refusing to write {path}: {name} holds {bad} NaN or inf values")
    return numpy.ascontiguousarray(array, dtype=numpy.float32)


def _numpy(tensor: torch.Tensor) -> numpy.ndarray:
    return tensor.detach().cpu().float().numpy()


def _copy(parameter: torch.Tensor, value: numpy.ndarray) -> None:
    with torch.no_grad():
        parameter.copy_(torch.from_numpy(numpy.ascontiguousarray(value)).to(parameter))


# ----------------------------------------------------------------------------------------------
# weights.hdf5 <-> encoder
# ----------------------------------------------------------------------------------------------


def _lstm_dataset(direction: int, layer: int, name: str) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/{name}"


def _swap_j_f(array: numpy.ndarray, cells: int) -> numpy.ndarray:
    """Gate blocks along axis 0: TensorFlow i, j, f, o <-> torch i, f, g(=j), o (an involution)."""
    return numpy.concatenate([array[:cells], array[2 * cells : 3 * cells], array[cells : 2 * cells], array[3 * cells :]])


def _forget_ones(cells: int) -> numpy.ndarray:
    """1.0 on torch's forget gate block (i, f, g, o), 0 elsewhere."""
    ones = numpy.zeros(4 * cells, numpy.float32)
    ones[cells : 2 * cells] = 1.0
    return ones


def _directions(lstm: ElmoLstm) -> Iterator[Tuple[int, int, torch.nn.LSTM]]:
    for layer, (forward, backward) in enumerate(zip(lstm.forward_layers, lstm.backward_layers)):
        yield 0, layer, forward
        yield 1, layer, backward


def load_weights(encoder: BiLmEncoder, weights_file: str, options_file: Optional[str] = None) -> None:
    """Copies weights.hdf5 into an encoder whose architecture matches its options."""
    cnn, lstm = encoder.char_cnn, encoder.contextualizer
    encoder_options(encoder)  # an LSTM encoder, or a clear error
    embedding_dim = cnn.char_embedding.embedding_dim
    num_filters = sum(count for _, count in cnn.filters)
    projection_dim, cells = lstm.input_dim, lstm.hidden_dim
    with _Hdf5Reader(weights_file, "weights", options_file) as weights:
        char_embed = weights.read("char_embed", (cnn.char_embedding.num_embeddings - 1, embedding_dim))
        _copy(cnn.char_embedding.weight, numpy.concatenate([numpy.zeros((1, embedding_dim), numpy.float32), char_embed]))
        for index, ((width, count), conv) in enumerate(zip(cnn.filters, cnn.convolutions)):
            kernel = weights.read(f"CNN/W_cnn_{index}", (1, width, embedding_dim, count))
            _copy(conv.weight, kernel[0].transpose(2, 1, 0))
            _copy(conv.bias, weights.read(f"CNN/b_cnn_{index}", (count,)))
        for index, layer in enumerate(cnn.highways._layers):
            w_transform = weights.read(f"CNN_high_{index}/W_transform", (num_filters, num_filters))
            w_carry = weights.read(f"CNN_high_{index}/W_carry", (num_filters, num_filters))
            b_transform = weights.read(f"CNN_high_{index}/b_transform", (num_filters,))
            b_carry = weights.read(f"CNN_high_{index}/b_carry", (num_filters,))
            _copy(layer.weight, numpy.concatenate([w_transform.T, -w_carry.T]))
            _copy(layer.bias, numpy.concatenate([b_transform, -b_carry]))
        _copy(cnn.projection.weight, weights.read("CNN_proj/W_proj", (num_filters, projection_dim)).T)
        _copy(cnn.projection.bias, weights.read("CNN_proj/b_proj", (projection_dim,)))
        for direction, layer, cell in _directions(lstm):
            packed = weights.read(_lstm_dataset(direction, layer, "W_0"), (2 * projection_dim, 4 * cells)).T
            bias = weights.read(_lstm_dataset(direction, layer, "B"), (4 * cells,))
            _copy(cell.weight_ih_l0, _swap_j_f(packed[:, :projection_dim], cells))
            _copy(cell.weight_hh_l0, _swap_j_f(packed[:, projection_dim:], cells))
            # The file's bias in bias_ih, TensorFlow's run-time +1.0 forget bias in bias_hh:
            # the LSTM adds them, and writing it back out is exact.
            _copy(cell.bias_ih_l0, _swap_j_f(bias, cells))
            _copy(cell.bias_hh_l0, _forget_ones(cells))
            _copy(cell.weight_hr_l0, weights.read(_lstm_dataset(direction, layer, "W_P_0"), (cells, projection_dim)).T)


def read_bilm_encoder(options_file: str, weights_file: str) -> BiLmEncoder:
    """options.json + weights.hdf5 -> a `BiLmEncoder` (ElmoCharCnn + ElmoLstm, no dropout)."""
    options = read_options(options_file)
    with _Hdf5Reader(weights_file, "weights", options_file) as weights:
        shape = weights.shape("char_embed")
    dim = options["char_cnn"]["embedding"]["dim"]
    if len(shape) != 2 or shape[0] < NUM_CHARACTERS - 1 or shape[1] != dim:
        raise ElmoFilesError(
            f"{weights_file}: dataset char_embed has shape {shape} but {options_file} implies "
            f"({NUM_CHARACTERS - 1}, {dim})"
        )
    encoder = build_bilm_encoder(options, num_characters=shape[0] + 1)
    load_weights(encoder, weights_file, options_file)
    return encoder.eval()


def weight_arrays(encoder: BiLmEncoder) -> Dict[str, numpy.ndarray]:
    """Dataset name -> array of weights.hdf5 for one of our encoders."""
    encoder_options(encoder)
    cnn, lstm = encoder.char_cnn, encoder.contextualizer
    num_filters = sum(count for _, count in cnn.filters)
    arrays = {"char_embed": _numpy(cnn.char_embedding.weight)[1:]}
    for index, conv in enumerate(cnn.convolutions):
        arrays[f"CNN/W_cnn_{index}"] = _numpy(conv.weight).transpose(2, 1, 0)[None]
        arrays[f"CNN/b_cnn_{index}"] = _numpy(conv.bias)
    for index, layer in enumerate(cnn.highways._layers):
        weight, bias = _numpy(layer.weight), _numpy(layer.bias)
        arrays[f"CNN_high_{index}/W_transform"] = weight[:num_filters].T
        arrays[f"CNN_high_{index}/W_carry"] = -weight[num_filters:].T
        arrays[f"CNN_high_{index}/b_transform"] = bias[:num_filters]
        arrays[f"CNN_high_{index}/b_carry"] = -bias[num_filters:]
    arrays["CNN_proj/W_proj"] = _numpy(cnn.projection.weight).T
    arrays["CNN_proj/b_proj"] = _numpy(cnn.projection.bias)
    cells = lstm.hidden_dim
    for direction, layer, cell in _directions(lstm):
        packed = numpy.concatenate(
            [_swap_j_f(_numpy(cell.weight_ih_l0), cells), _swap_j_f(_numpy(cell.weight_hh_l0), cells)], axis=1
        )
        # stored without TensorFlow's run-time +1.0 forget bias
        bias = _swap_j_f(_numpy(cell.bias_ih_l0) + (_numpy(cell.bias_hh_l0) - _forget_ones(cells)), cells)
        arrays[_lstm_dataset(direction, layer, "W_0")] = packed.T
        arrays[_lstm_dataset(direction, layer, "B")] = bias
        arrays[_lstm_dataset(direction, layer, "W_P_0")] = _numpy(cell.weight_hr_l0).T
    return arrays


def _write_hdf5(path: str, arrays: Dict[str, numpy.ndarray]) -> None:
    checked = {name: _finite(name, array, path) for name, array in arrays.items()}
    partial = path + ".partial"
    with h5py.File(partial, "w") as out:
        for name, array in checked.items():
            out.create_dataset(name, data=array)
    os.replace(partial, path)


def write_bilm_encoder(
    encoder: BiLmEncoder, options_file: str, weights_file: str, extra_options: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """Writes an LSTM encoder as options.json + weights.hdf5; returns the options written."""
    options = encoder_options(encoder)
    options.update(extra_options or {})
    _write_hdf5(weights_file, weight_arrays(encoder))
    with open(options_file, "w", encoding="utf-8") as out:
        json.dump(options, out, indent=2)
        out.write("\n")
    return options


# ----------------------------------------------------------------------------------------------
# softmax.hdf5 + vocab.txt <-> LanguageModel softmax
# ----------------------------------------------------------------------------------------------


def softmax_matrices(softmax_loss: torch.nn.Module) -> Tuple[torch.Tensor, torch.Tensor]:
    """(weight (rows, P), bias (rows,)) views of allennlp's `SoftmaxLoss` (softmax_w is (P, rows))
    or `SampledSoftmaxLoss` (softmax_w (rows, P), or sparse embeddings). Row r scores vocabulary
    index r + 1 (index 0 is padding), so the last row scores no token."""
    weight, bias = softmax_loss.softmax_w, softmax_loss.softmax_b
    if isinstance(weight, torch.nn.Embedding):
        return weight.weight, bias.weight[:, 0]
    if isinstance(softmax_loss, SoftmaxLoss):
        return weight.t(), bias
    return weight, bias


def read_vocab_file(vocab_file: str) -> List[str]:
    """vocab.txt lines (line i = softmax row i); `<UNK>` read as allennlp's `@@UNKNOWN@@`."""
    from allennlp.data.vocabulary import DEFAULT_OOV_TOKEN

    _require_file(vocab_file, "vocabulary")
    with open(vocab_file, encoding="utf-8") as source:
        tokens = source.read().split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    if DEFAULT_OOV_TOKEN not in tokens and PUBLISHED_UNKNOWN in tokens:
        tokens[tokens.index(PUBLISHED_UNKNOWN)] = DEFAULT_OOV_TOKEN
    return tokens


def write_vocab_file(vocab_file: str, tokens: List[str]) -> None:
    with open(vocab_file, "w", encoding="utf-8") as out:
        out.write("".join(token + "\n" for token in tokens))


def read_softmax(softmax_file: str, rows: int, dim: int) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """softmax.hdf5 -> (weight (rows, dim), bias (rows,)), checked."""
    with _Hdf5Reader(softmax_file, "softmax") as softmax:
        return softmax.read("weight", (rows, dim)), softmax.read("bias", (rows,))


def write_softmax(softmax_file: str, weight: numpy.ndarray, bias: numpy.ndarray) -> None:
    _write_hdf5(softmax_file, {"weight": weight, "bias": bias})


def export_softmax(model, softmax_file: str, vocab_file: str, namespace: str = "tokens") -> int:
    """A `LanguageModel`'s softmax -> softmax.hdf5 + vocab.txt (vocabulary index i + 1 on line i);
    returns the number of rows."""
    weight, bias = softmax_matrices(model._softmax_loss)
    tokens = [model.vocab.get_token_from_index(index, namespace) for index in range(1, model.vocab.get_vocab_size(namespace))]
    write_softmax(softmax_file, _numpy(weight)[: len(tokens)], _numpy(bias)[: len(tokens)])
    write_vocab_file(vocab_file, tokens)
    return len(tokens)


# A logit this low has probability exactly 0 in float32 and gets no gradient.
NO_TOKEN_BIAS = -1.0e4


def import_softmax(model, softmax_file: str, vocab_file: str, namespace: str = "tokens") -> None:
    """softmax.hdf5 + vocab.txt -> a `LanguageModel`'s softmax, row by token: the file's row for
    token t goes to the model's row for t's vocabulary index. Model tokens the file lacks keep
    their initial values (logged); the model's last row, which scores no token, gets probability 0,
    so the imported model's distribution is the file's over its vocabulary."""
    tokens = read_vocab_file(vocab_file)
    weight, bias = softmax_matrices(model._softmax_loss)
    file_weight, file_bias = read_softmax(softmax_file, len(tokens), weight.size(1))
    token_to_index = model.vocab.get_token_to_index_vocabulary(namespace)
    file_rows, model_rows = [], []
    for row, token in enumerate(tokens):
        index = token_to_index.get(token)
        if index is not None and index > 0:
            file_rows.append(row)
            model_rows.append(index - 1)
    if not file_rows:
        raise ElmoFilesError(f"{vocab_file}: no token of it is in the model's {namespace!r} vocabulary")
    missing = len(token_to_index) - 1 - len(set(model_rows))
    if missing > 0 or len(file_rows) < len(tokens):
        logger.warning(
            "%s: %d of the model's %d tokens have no softmax row in it (initialized randomly); "
            "%d of its %d rows are not in the model's vocabulary (dropped)",
            softmax_file, missing, len(token_to_index) - 1, len(tokens) - len(file_rows), len(tokens),
        )
    with torch.no_grad():
        index = torch.tensor(model_rows, dtype=torch.long, device=weight.device)
        weight.index_copy_(0, index, torch.from_numpy(file_weight[file_rows]).to(weight))
        bias.index_copy_(0, index, torch.from_numpy(file_bias[file_rows]).to(bias))
        unused = model.vocab.get_vocab_size(namespace) - 1
        if unused < weight.size(0):
            weight[unused:] = 0.0
            bias[unused:] = NO_TOKEN_BIAS


def import_elmo_files(model, folder: str) -> None:
    """Loads an ELMo file folder into an `elmo_bilm` whose configured architecture must equal
    options.json: weights.hdf5 always, softmax.hdf5 (+ vocab.txt) when the folder has one."""
    options_file, weights_file = os.path.join(folder, OPTIONS_FILE), os.path.join(folder, WEIGHTS_FILE)
    if not os.path.isdir(folder):
        raise ElmoFilesError(f"pretrained ELMo folder not found: {folder}")
    options = read_options(options_file)
    encoder = model.bilm_encoder()
    check_architecture(encoder, options, options_file)
    load_weights(encoder, weights_file, options_file)
    softmax_file = os.path.join(folder, SOFTMAX_FILE)
    if os.path.exists(softmax_file):
        import_softmax(model, softmax_file, os.path.join(folder, VOCAB_FILE))
    else:
        logger.warning("%s has no %s: the softmax starts from its initial values", folder, SOFTMAX_FILE)
    logger.info("loaded the biLM weights of %s", folder)
