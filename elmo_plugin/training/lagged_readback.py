"""`LaggedReadback`: device values read on the host one read late, so that reading them does not
wait for the work that makes them."""

from typing import Optional

import torch


class LaggedReadback:
    """
    `read(tensor)` -> a CPU tensor. For a CUDA tensor: it copies `tensor` into pinned host memory
    without blocking and returns the copy the previous `read` made, waiting only for the work
    queued before that read (on a GPU: normally done, one step back), so the host keeps queuing
    work while the device computes. The first read returns its own copy (it waits). For a tensor
    elsewhere (the CPU): a copy of its values now.
    """

    def __init__(self) -> None:
        self._pending: Optional[tuple[torch.Tensor, torch.cuda.Event]] = None

    def __deepcopy__(self, memo: dict) -> "LaggedReadback":
        """A copy without the pending read (a CUDA event cannot be copied): its first read
        waits."""
        return LaggedReadback()

    def read(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        if tensor.device.type != "cuda":
            return tensor.clone()
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        previous, self._pending = self._pending, (host, event)
        copy, done = previous or self._pending
        done.synchronize()
        return copy
