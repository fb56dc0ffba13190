"""`StepGraph`: one training step captured once in a CUDA graph and replayed for every batch of
the same shapes."""

import contextlib
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


class CaptureStream:
    """
    The one side stream on which a step is warmed up and then captured (PyTorch's CUDA graph
    notes: the warm-up runs on a side stream, so that what each stream makes once is made
    before the capture, not inside it). `run(function, *args)` runs `function` on it, ordered
    after the work queued before and before the work queued after on the current stream;
    `graph()` is the capture context on it.
    """

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device)
        self.device = device

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            result = function(*args)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return result

    def graph(self, graph: torch.cuda.CUDAGraph) -> contextlib.AbstractContextManager:
        return torch.cuda.graph(graph, stream=self.stream)

    def reset(self) -> None:
        """After a failed capture: the device's default stream current again (a capture that
        raises leaves its stream current)."""
        torch.cuda.set_stream(torch.cuda.default_stream(self.device))


class StepGraph:
    """
    `step(batch)` -> a dict of device tensors: the whole training step (forward, backward,
    gradient clipping, optimizer step), with no host reads and no shape that depends on the data.
    Built on a CUDA device: `step` is captured into one `torch.cuda.CUDAGraph` on `stream`
    (where the step was warmed up) on a copy of `batch` (its static input buffers).
    `replay(batch)` copies a batch of the same layout into those buffers and replays the graph
    -> the step's outputs (the same tensors each replay, overwritten by the next one). The
    capture itself runs no kernel: the first replay trains the capture's batch.
    """

    def __init__(self, step: Step, batch: Any, stream: CaptureStream) -> None:
        self.layout = batch_layout(batch)
        self._inputs = tree_map(lambda leaf: leaf.clone() if torch.is_tensor(leaf) else leaf, batch)
        self._graph = torch.cuda.CUDAGraph()
        with stream.graph(self._graph):
            self._outputs = step(self._inputs)

    def fits(self, batch: Any) -> bool:
        return batch_layout(batch) == self.layout

    def replay(self, batch: Any) -> dict[str, torch.Tensor]:
        for buffer, leaf in zip(tree_flatten(self._inputs)[0], tree_flatten(batch)[0], strict=True):
            if torch.is_tensor(buffer):
                buffer.copy_(leaf, non_blocking=True)
        self._graph.replay()
        return self._outputs


class WarmupStep:
    """The last warm-up batch's step: `replay(batch)` runs `step` eagerly on the capture stream
    -> its outputs, as a `StepGraph` replay hands them on."""

    def __init__(self, step: Step, stream: CaptureStream) -> None:
        self.step, self.stream = step, stream

    def replay(self, batch: Any) -> dict[str, torch.Tensor]:
        return self.stream.run(self.step, batch)
