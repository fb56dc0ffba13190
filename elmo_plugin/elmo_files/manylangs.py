"""An ELMoForManyLangs (HIT-SCIR) model folder -> a `BiLmEncoder` (`elmo_manylangs_cnn`, with
its dictionaries, + `elmo_lstm`) and its architecture, read as its own `Embedder.get_model` reads
them (the reference: the `elmoformanylangs` package, 0.0.4.post2). Or its weights into an
encoder configured with its architecture (continued pretraining).

The folder: `config.json` (`config_path` names the architecture JSON), `char.dic`, `word.dic`
(when `word_dim` > 0), `token_embedder.pkl` and `encoder.pkl` (torch state dicts).
"""

import os
from typing import Any, Optional

import torch
from allennlp.data import Vocabulary

from elmo_plugin.data.elmo_manylangs_files import model_config, read_dictionaries
from elmo_plugin.data.elmo_manylangs_indexer import (
    DEFAULT_NAMESPACE,
    PAD,
    boundary_ids,
    record_dictionaries,
)
from elmo_plugin.elmo_files.layout import ElmoFilesError
from elmo_plugin.elmo_files.weights_only import without_unsafe_advice
from elmo_plugin.modules.bilm_encoder import Architecture, BiLmEncoder

# The `elmo_lstm` arguments that an ELMoForManyLangs release fixes (dropout is ours to choose).
CONTEXTUALIZER_KEYS = ("input_dim", "cell_size", "num_layers", "cell_clip", "proj_clip")


def manylangs_architecture(
    config: dict[str, Any], chars: dict[str, int], words: Optional[dict[str, int]], folder: str
) -> Architecture:
    """Its architecture JSON -> ours; a clear error for what we do not support."""
    embedder, encoder = config.get("token_embedder", {}), config.get("encoder", {})
    if (
        str(embedder.get("name", "")).lower() != "cnn"
        or str(encoder.get("name", "")).lower() != "elmo"
    ):
        raise ElmoFilesError(
            f"{folder}: token_embedder {embedder.get('name')!r} with encoder "
            f"{encoder.get('name')!r} is not supported: only the 'cnn' token embedder with the "
            "'elmo' encoder (ELMoForManyLangs' released models)"
        )
    max_chars = embedder["max_characters_per_token"]
    return {
        "token_embedder": {
            "type": "elmo_manylangs_cnn",
            "num_characters": len(chars),
            "char_dim": embedder["char_dim"],
            "filters": embedder["filters"],
            "num_highway": embedder["n_highway"],
            "projection_dim": encoder["projection_dim"],
            "sentence_boundaries": boundary_ids(chars, words, max_chars),
            "num_words": len(words) if words else 0,
            "word_dim": embedder["word_dim"],
            "activation": embedder.get("activation", "relu"),
            "max_characters_per_token": max_chars,
            "char_padding_id": chars[PAD],
            "word_padding_id": words[PAD] if words else None,
        },
        "contextualizer": {
            "type": "elmo_lstm",
            "input_dim": encoder["projection_dim"],
            "cell_size": encoder["dim"],
            "num_layers": encoder["n_layers"],
            # its cell tests `if clip:`, so 0 means no clipping
            "cell_clip": encoder["cell_clip"] or None,
            "proj_clip": encoder["proj_clip"] or None,
        },
    }


def token_embedder_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """token_embedder.pkl's keys -> `ElmoManyLangsCnn`'s."""
    renamed = {
        "char_emb_layer.embedding.weight": "char_embedding.weight",
        "word_emb_layer.embedding.weight": "word_embedding.weight",
    }
    return {renamed.get(key, key): value for key, value in state.items()}


def encoder_state(state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """encoder.pkl (`LstmCellWithProjection`s, gates i, f, g, o as torch's) -> `elmo_lstm`'s
    torch LSTMs: input_linearity -> weight_ih, state_linearity -> weight_hh + bias_ih (bias_hh
    zero), state_projection -> weight_hr."""
    converted = {}
    for direction in ("forward", "backward"):
        for layer in range(num_layers):
            source, target = f"{direction}_layer_{layer}.", f"{direction}_layers.{layer}."
            bias = state[source + "state_linearity.bias"]
            converted.update(
                {
                    target + "weight_ih_l0": state[source + "input_linearity.weight"],
                    target + "weight_hh_l0": state[source + "state_linearity.weight"],
                    target + "bias_ih_l0": bias,
                    target + "bias_hh_l0": torch.zeros_like(bias),
                    target + "weight_hr_l0": state[source + "state_projection.weight"],
                }
            )
    return converted


def load_state(path: str) -> dict[str, torch.Tensor]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a damaged file
        message = without_unsafe_advice(error)
        raise ElmoFilesError(f"{path}: unreadable torch state dict ({message})") from None


def read_manylangs_folder(folder: str) -> tuple[BiLmEncoder, Architecture]:
    """folder -> (encoder with its weights and dictionaries, eval mode; its architecture)."""
    config = model_config(folder)
    chars, words = read_dictionaries(folder, config)
    architecture = manylangs_architecture(config, chars, words, folder)
    dictionaries = Vocabulary()  # where its token embedder reads them
    record_dictionaries(dictionaries, DEFAULT_NAMESPACE, chars, words, folder)
    encoder = BiLmEncoder.from_architecture(architecture, dictionaries)
    try:
        encoder.char_cnn.load_state_dict(
            token_embedder_state(load_state(os.path.join(folder, "token_embedder.pkl")))
        )
        num_layers = architecture["contextualizer"]["num_layers"]
        encoder.contextualizer.load_state_dict(
            encoder_state(load_state(os.path.join(folder, "encoder.pkl")), num_layers)
        )
    except (RuntimeError, KeyError) as error:
        raise ElmoFilesError(
            f"{folder}: its weights do not fit its architecture ({error})"
        ) from None
    return encoder.eval(), architecture


def load_manylangs_folder(folder: str, encoder: BiLmEncoder) -> None:
    """An ELMoForManyLangs model's weights into `encoder` (a model's own), whose character encoder
    and contextualizer must have its architecture (dropouts aside); an error listing what
    differs. Its softmax is not read (releases have none)."""
    release, architecture = read_manylangs_folder(folder)
    configured_embedder = encoder.characters.architecture
    if configured_embedder["type"] != architecture["token_embedder"]["type"]:
        raise ElmoFilesError(
            f"{folder} is an ELMoForManyLangs model: elmo_bilm needs an elmo_manylangs_cnn "
            f"token embedder to load it, not {configured_embedder['type']}"
        )
    contextualizer = {
        key: getattr(encoder.contextualizer, key, None) for key in CONTEXTUALIZER_KEYS
    }
    configured = {**configured_embedder, **contextualizer}
    released = {
        **architecture["token_embedder"],
        **{key: architecture["contextualizer"][key] for key in contextualizer},
    }
    differing = {
        key: (configured.get(key), value)
        for key, value in released.items()
        if configured.get(key) != value
    }
    if differing:
        raise ElmoFilesError(
            f"{folder}: the configured biLM differs from the release (configured, release): "
            f"{differing}"
        )
    encoder.load_state_dict(release.state_dict())
