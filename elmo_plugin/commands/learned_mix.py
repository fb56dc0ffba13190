"""The layer mix a downstream model learned, for `allennlp elmo-embed --layers mix:ARCHIVE`: the
`ScalarMix` (softmax(s), gamma) of an `elmo_bilm_embedder` read from the model's archive."""

import json
import logging
import os
import re
from typing import Any, NamedTuple

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.archives.bilm_archive import archived_state, folder_config, model_folder
from elmo_plugin.elmo_files.source import local_path
from elmo_plugin.modules.bilm_encoder import BiLmEncoder

logger = logging.getLogger(__name__)

MIX_PREFIX = "mix:"
SCALAR = re.compile(r"^(.*)\.scalar_parameters\.(\d+)$")  # allennlp ScalarMix's parameters


class LearnedMix(NamedTuple):
    """gamma * sum_j weights_j * layer_j, with `weights` = softmax(s) as the model learned them;
    `name` is the mix's module path in the model, `bilm` the biLM weights the model held
    (name -> tensor, names as in `BiLmEncoder.state_dict()`; empty if it held none)."""

    archive: str
    name: str
    weights: list[float]
    gamma: float
    bilm: dict[str, torch.Tensor]

    def check_fits(self, encoder: BiLmEncoder, model: str) -> None:
        """A ConfigurationError when the mix was learned over a biLM of another layer count or
        width than `encoder` (MODEL); a warning when only the biLM's weights differ."""
        if len(self.weights) != encoder.num_layers:
            raise ConfigurationError(
                f"elmo-embed: the mix {self.name} in {self.archive} has {len(self.weights)} "
                f"layers; {model} has {encoder.num_layers}"
            )
        ours = encoder.state_dict()
        differ = False
        for key, value in self.bilm.items():
            if key not in ours or ours[key].shape != value.shape:
                got = tuple(ours[key].shape) if key in ours else "no such tensor"
                raise ConfigurationError(
                    f"elmo-embed: the mix in {self.archive} was learned over another biLM: its "
                    f"{key} has shape {tuple(value.shape)}, {model}'s {got}"
                )
            differ = differ or not torch.equal(ours[key].cpu(), value)
        if differ:
            logger.warning(
                "elmo-embed: the biLM in %s has the shapes of %s but other weights",
                self.archive,
                model,
            )

    def settings(self) -> str:
        """What `--resume` compares: the archive, the mix and its values."""
        return json.dumps([self.archive, self.name, self.weights, self.gamma])


def mix_archive(layers: str) -> str:
    """The ARCHIVE of `mix:ARCHIVE` ("" for the fixed choices)."""
    return layers[len(MIX_PREFIX) :] if layers.startswith(MIX_PREFIX) else ""


def _layer_norm_in(config: Any) -> bool:
    """Whether any part of the config sets `do_layer_norm: true`."""
    if isinstance(config, dict):
        return config.get("do_layer_norm") is True or any(map(_layer_norm_in, config.values()))
    if isinstance(config, list):
        return any(map(_layer_norm_in, config))
    return False


def read_learned_mix(archive: str) -> LearnedMix:
    """The one layer mix of a downstream model archive; a one-line ConfigurationError for an
    archive that is not a model archive, holds no mix or several, or normalizes layers inside
    its mix (`do_layer_norm`, which depends on the whole padded batch)."""
    if "://" not in archive and not os.path.exists(archive):
        raise ConfigurationError(f"elmo-embed: --layers mix: model archive not found: {archive}")
    try:
        with model_folder(local_path(archive, "model archive"), archive) as folder:
            config, state = folder_config(folder, archive), archived_state(folder)
    except ConfigurationError as error:
        message = str(error)
        raise ConfigurationError(
            message if message.startswith("elmo-embed") else f"elmo-embed: --layers mix: {message}"
        ) from None
    scalars: dict[str, dict[int, float]] = {}
    for key, value in state.items():
        match = SCALAR.match(key)
        if match:
            scalars.setdefault(match.group(1), {})[int(match.group(2))] = float(value)
    mixes = sorted(name for name in scalars if f"{name}.gamma" in state)
    if len(mixes) != 1:
        found = ", ".join(f"{name} ({len(scalars[name])} layers)" for name in mixes) or "none"
        raise ConfigurationError(
            f"elmo-embed: --layers mix:{archive} needs a model with exactly one ELMo layer mix "
            f"(allennlp ScalarMix); found {len(mixes)}: {found}"
        )
    if _layer_norm_in(config):
        raise ConfigurationError(
            f"elmo-embed: the mix in {archive} uses do_layer_norm, which elmo-embed cannot apply "
            "sentence by sentence"
        )
    name = mixes[0]
    values = scalars[name]
    s = torch.tensor([values[index] for index in sorted(values)], dtype=torch.float64)
    embedder = name.rpartition(".")[0]
    bilm_prefix = f"{embedder}.bilm." if embedder else "bilm."
    return LearnedMix(
        archive,
        name,
        torch.softmax(s, dim=0).tolist(),
        float(state[f"{name}.gamma"]),
        {k[len(bilm_prefix) :]: v for k, v in state.items() if k.startswith(bilm_prefix)},
    )
