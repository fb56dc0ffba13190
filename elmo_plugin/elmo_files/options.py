"""`options.json` <-> a biLM encoder's architecture: reading and checking the file, the
architecture it describes, and the file of one of our LSTM encoders."""

import json
from typing import Any, Optional

from elmo_plugin.elmo_files.layout import ElmoFilesError, require_file
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ACTIVATIONS, ElmoCharCnn
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer

MAX_CHARACTERS_PER_TOKEN = 50
NUM_CHARACTERS = 262
REQUIRED_OPTIONS = [
    ("lstm", "projection_dim"),
    ("lstm", "dim"),
    ("lstm", "n_layers"),
    ("char_cnn", "filters"),
    ("char_cnn", "n_highway"),
    ("char_cnn", "embedding"),
]
ARCHITECTURE_KEYS = [
    ("char_cnn", "activation"),
    ("char_cnn", "filters"),
    ("char_cnn", "n_highway"),
    ("lstm", "projection_dim"),
    ("lstm", "dim"),
    ("lstm", "n_layers"),
    ("lstm", "cell_clip"),
    ("lstm", "proj_clip"),
]


def _option(options: dict[str, Any], section: str, key: str, options_file: str) -> Any:
    try:
        return options[section][key]
    except (KeyError, TypeError):
        raise ElmoFilesError(f"{options_file}: missing option {section}.{key}") from None


def read_options(options_file: str) -> dict[str, Any]:
    """options.json -> dict, checked for everything our modules (and allennlp) need."""
    require_file(options_file, "options")
    try:
        with open(options_file, encoding="utf-8") as source:
            options = json.load(source)
    except (ValueError, UnicodeDecodeError) as error:
        raise ElmoFilesError(f"{options_file}: not valid JSON ({error})") from None
    for section, key in REQUIRED_OPTIONS:
        _option(options, section, key, options_file)
    if (
        not isinstance(options["char_cnn"]["embedding"], dict)
        or "dim" not in options["char_cnn"]["embedding"]
    ):
        raise ElmoFilesError(f"{options_file}: missing option char_cnn.embedding.dim")
    if not options["lstm"].get("use_skip_connections"):
        raise ElmoFilesError(
            f"{options_file}: lstm.use_skip_connections must be true (ELMo's residual connections; "
            "allennlp's reader supports nothing else)"
        )
    activation = options["char_cnn"].get("activation", "relu")
    if activation not in ACTIVATIONS:
        raise ElmoFilesError(
            f"{options_file}: char_cnn.activation {activation!r} is not one of {list(ACTIVATIONS)}"
        )
    max_chars = options["char_cnn"].get("max_characters_per_token", MAX_CHARACTERS_PER_TOKEN)
    if max_chars != MAX_CHARACTERS_PER_TOKEN:
        raise ElmoFilesError(
            f"{options_file}: char_cnn.max_characters_per_token is {max_chars}; ELMo's character "
            f"ids are {MAX_CHARACTERS_PER_TOKEN} per token"
        )
    return options


def _clip(value: Optional[float]) -> Optional[float]:
    """allennlp treats a missing, null or 0 clip as no clipping (`if clip_value:`)."""
    return float(value) if value else None


def architecture_from_options(
    options: dict[str, Any], num_characters: int = NUM_CHARACTERS
) -> Architecture:
    """The encoder architecture (`BiLmEncoder.from_architecture`) an options dict describes."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    return {
        "token_embedder": {
            "type": "elmo_char_cnn",
            "filters": [[int(width), int(count)] for width, count in cnn["filters"]],
            "num_highway": int(cnn["n_highway"]),
            "projection_dim": int(lstm["projection_dim"]),
            "embedding_dim": int(cnn["embedding"]["dim"]),
            "activation": cnn.get("activation", "relu"),
            "num_characters": int(num_characters),
        },
        "contextualizer": {
            "type": "elmo_lstm",
            "input_dim": int(lstm["projection_dim"]),
            "cell_size": int(lstm["dim"]),
            "num_layers": int(lstm["n_layers"]),
            "cell_clip": _clip(lstm.get("cell_clip")),
            "proj_clip": _clip(lstm.get("proj_clip")),
        },
    }


def lstm_encoder_parts(encoder: BiLmEncoder) -> tuple[ElmoCharCnn, ElmoLstmContextualizer]:
    """(character CNN, LSTM) of an encoder the standard files can describe; a clear error for
    any other."""
    cnn, lstm = encoder.char_cnn, encoder.contextualizer
    if not isinstance(lstm, ElmoLstmContextualizer):
        raise ElmoFilesError(
            f"the standard ELMo files (options.json + weights.hdf5) describe only LSTM biLMs; this "
            f"model's contextualizer is a {type(lstm).__name__}, which the standard layout has no "
            "place for (use the model.tar.gz archive itself instead)"
        )
    if not isinstance(cnn, ElmoCharCnn):
        raise ElmoFilesError(
            "the standard ELMo files (options.json + weights.hdf5) describe only ELMo's character "
            f"CNN; this model's character encoder is a {type(cnn).__name__} (use the model.tar.gz "
            "archive itself instead)"
        )
    return cnn, lstm


def encoder_options(encoder: BiLmEncoder) -> dict[str, Any]:
    """The options.json dict of one of our encoders; an error for anything but an LSTM."""
    cnn, lstm = lstm_encoder_parts(encoder)
    return {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": lstm.input_dim,
            "cell_clip": lstm.cell_clip,
            "proj_clip": lstm.proj_clip,
            "dim": lstm.cell_size,
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


def check_architecture(encoder: BiLmEncoder, options: dict[str, Any], options_file: str) -> None:
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
            f"char_cnn.embedding.dim: config {ours['char_cnn']['embedding']['dim']} vs options "
            f"file {options['char_cnn']['embedding']['dim']}"
        )
    if differences:
        raise ElmoFilesError(
            f"the configured biLM does not match {options_file}: " + "; ".join(differences)
        )
