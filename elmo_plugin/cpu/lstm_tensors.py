"""The named tensors every clipped LSTM path takes and returns: the reference loop
(`modules/clipped_lstm.py`) and the CPU fast path (`packed_clipped_lstm`)."""

from collections.abc import Sequence
from typing import NamedTuple, Optional

import torch


class LstmWeights(NamedTuple):
    """One layer's weights, every direction stacked, in `torch.nn.LSTM`'s layout (gates in its
    order i, f, g, o): w_ih (directions, 4 * cells, in), bias = b_ih + b_hh (directions, 1,
    4 * cells), w_hh (directions, 4 * cells, proj), w_hr (directions, proj, cells)."""

    w_ih: torch.Tensor
    bias: torch.Tensor
    w_hh: torch.Tensor
    w_hr: torch.Tensor


class Clips(NamedTuple):
    """The memory cell is clipped to +-cell and the projected state to +-proj at every step;
    None: not clipped."""

    cell: Optional[float] = None
    proj: Optional[float] = None


class LstmState(NamedTuple):
    """What a step carries to the next: state (directions, batch, proj), memory (directions,
    batch, cells)."""

    state: torch.Tensor
    memory: torch.Tensor


def stacked_weights(lstms: Sequence[torch.nn.Module]) -> LstmWeights:
    """Each direction's `torch.nn.LSTM` (one layer, with projection) as `LstmWeights`; gradients
    flow back to the LSTMs' own parameters."""
    names = ("weight_ih_l0", "bias_ih_l0", "bias_hh_l0", "weight_hh_l0", "weight_hr_l0")
    w_ih, b_ih, b_hh, w_hh, w_hr = (
        torch.stack([getattr(lstm, name) for lstm in lstms]) for name in names
    )
    return LstmWeights(w_ih, (b_ih + b_hh).unsqueeze(1), w_hh, w_hr)
