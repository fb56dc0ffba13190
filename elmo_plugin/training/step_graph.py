"""`StepGraph`: one training step captured once in a CUDA graph and replayed for every batch of
the same shapes."""

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

Step = Callable[[Any], dict[str, torch.Tensor]]


def batch_layout(batch: Any) -> tuple[Any, list[tuple[Any, ...]]]:
    """A batch's nesting (allennlp's dicts of dicts of tensors) and each tensor's (shape, dtype,
    device): two batches with the same layout fit one captured graph."""
    leaves, spec = tree_flatten(batch)
    return spec, [
        (tuple(leaf.shape), leaf.dtype, leaf.device) if torch.is_tensor(leaf) else (leaf,)
        for leaf in leaves
    ]


class StepGraph:
    """
    `step(batch)` -> a dict of device tensors: the whole training step (forward, backward,
    gradient clipping, optimizer step), with no host reads and no shape that depends on the data.
    Built on a CUDA device: `step` is captured into one `torch.cuda.CUDAGraph` on a copy of
    `batch` (its static input buffers). `replay(batch)` copies a batch of the same layout into
    those buffers and replays the graph -> the step's outputs (the same tensors each replay,
    overwritten by the next one). The capture itself runs no kernel: the first replay trains the
    capture's batch.
    """

    def __init__(self, step: Step, batch: Any) -> None:
        self.layout = batch_layout(batch)
        self._inputs = tree_map(lambda leaf: leaf.clone() if torch.is_tensor(leaf) else leaf, batch)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._outputs = step(self._inputs)

    def fits(self, batch: Any) -> bool:
        return batch_layout(batch) == self.layout

    def replay(self, batch: Any) -> dict[str, torch.Tensor]:
        for buffer, leaf in zip(tree_flatten(self._inputs)[0], tree_flatten(batch)[0], strict=True):
            if torch.is_tensor(buffer):
                buffer.copy_(leaf, non_blocking=True)
        self._graph.replay()
        return self._outputs
