"""`CarriedState`: a stateful biLM's LSTM state, carried from one batch to the next in buffers
that are updated in place."""

from typing import Optional

import torch

from elmo_plugin.modules.bilm_contextualizer import LayerState


class CarriedState:
    """
    Every layer's (state, memory) at the end of the last batch, detached, for the next batch
    (truncated backpropagation through time). The tensors live in one set of buffers per batch
    size, created by the first batch of that size and from then on overwritten in place, and the
    last batch's size is a device tensor: a training step captured in a CUDA graph reads and
    writes the same memory at every replay (`elmo_graph_step`). A batch of another size than the
    last one starts from zero state, as does a row whose stream starts.
    """

    def __init__(self) -> None:
        self._buffers: dict[int, list[LayerState]] = {}
        self._last_rows: Optional[torch.Tensor] = None  # () long, on the model's device

    @property
    def layers(self) -> Optional[list[LayerState]]:
        """The state the last batch ended with (the buffers themselves); None before any."""
        if self._last_rows is None:
            return None
        return self._buffers[int(self._last_rows)]

    def state(
        self, stream_start: Optional[torch.Tensor], rows: int, device: torch.device
    ) -> Optional[list[LayerState]]:
        """The state a batch of `rows` rows starts from: the carried one, zero in the rows whose
        stream starts (`stream_start` (rows,) bool) and everywhere when the last batch had
        another size; None (zero) before the first batch of this size."""
        buffers = self._buffers.get(rows)
        if buffers is None or self._last_rows is None or buffers[0][0].device != device:
            self._buffers.pop(rows, None)
            return None
        keep = (self._last_rows == rows).expand(rows)
        if stream_start is not None:
            keep = keep & ~stream_start.bool()
        keep = keep.view(1, -1, 1)
        return [(torch.where(keep, h, 0), torch.where(keep, c, 0)) for h, c in buffers]

    def update(self, final: list[LayerState]) -> None:
        """Keep `final` (every layer's (state, memory), (directions, rows, dim)), detached."""
        rows = final[0][0].size(1)
        buffers = self._buffers.get(rows)
        if buffers is None:
            self._buffers[rows] = [(h.detach().clone(), c.detach().clone()) for h, c in final]
        else:
            for (h, c), (new_h, new_c) in zip(buffers, final, strict=True):
                h.copy_(new_h.detach())
                c.copy_(new_c.detach())
        if self._last_rows is None or self._last_rows.device != final[0][0].device:
            self._last_rows = torch.tensor(rows, device=final[0][0].device)
        else:
            self._last_rows.fill_(rows)
