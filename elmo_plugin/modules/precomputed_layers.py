"""A frozen biLM's layers read from an `elmo-embed --layers all` file, found by each sentence's
ELMo character ids: what `elmo_bilm_embedder`'s `precomputed_layers` looks up instead of running
the biLM on sentences it has already embedded."""

import json
from typing import Optional

import h5py
import numpy
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.elmo_char_ids_indexer import words_to_char_ids


def sentence_key(char_ids: numpy.ndarray) -> bytes:
    """A sentence's (tokens, 50) ELMo character ids (0 = padding excluded) -> its lookup key."""
    return char_ids.astype(numpy.int16).tobytes()


class PrecomputedLayers:
    """Every sentence of an `elmo-embed` file of `--layers all` (float32, not pooled), held in
    memory: sentence -> (num_layers, tokens, dim), `<S>` / `</S>` removed, as `elmo-embed`
    writes it. Sentences are found by their ELMo character ids (tokens, 50): the ids of the
    file's line split on whitespace. A file of another shape is an error naming it."""

    def __init__(self, path: str, num_layers: int, dim: int) -> None:
        self.path = path
        self._layers: dict[bytes, torch.Tensor] = {}
        try:
            with h5py.File(path, "r") as vectors:
                index = json.loads(vectors["sentence_to_index"][0])
                for text, lines in index.items():
                    if text.split():
                        key = sentence_key(words_to_char_ids(text.split()))
                        self._layers[key] = self._read(vectors, str(lines[0]), num_layers, dim)
        except (OSError, KeyError) as error:
            raise ConfigurationError(
                f"elmo_bilm_embedder: precomputed_layers {path}: not an elmo-embed output file "
                f"({error})"
            ) from None

    def _read(self, vectors: h5py.File, name: str, num_layers: int, dim: int) -> torch.Tensor:
        dataset = vectors[name]
        if dataset.ndim != 3 or (dataset.shape[0], dataset.shape[2]) != (num_layers, dim):
            raise ConfigurationError(
                f"elmo_bilm_embedder: precomputed_layers {self.path}: dataset {name!r} has shape "
                f"{dataset.shape}, the biLM gives ({num_layers}, tokens, {dim}): write the file "
                "with `allennlp elmo-embed MODEL sentences.txt FILE` (--layers all, --pool none)"
            )
        if dataset.dtype != numpy.float32:
            raise ConfigurationError(
                f"elmo_bilm_embedder: precomputed_layers {self.path}: dataset {name!r} is "
                f"{dataset.dtype}; the layers must be float32 (elmo-embed --dtype float32)"
            )
        return torch.from_numpy(dataset[()])

    def __len__(self) -> int:
        return len(self._layers)

    def find(self, char_ids: torch.Tensor) -> Optional[torch.Tensor]:
        """One sentence's (tokens, 50) character ids -> its (num_layers, tokens, dim), or None
        when the file does not hold it."""
        return self._layers.get(sentence_key(char_ids.cpu().numpy()))
