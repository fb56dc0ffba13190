"""The reference clipped LSTM (`modules/clipped_lstm.py`), the definition the other paths are
tested against: torch's own LSTM where nothing is clipped, initial-state gradients included."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, stacked_weights
from elmo_plugin.modules.clipped_lstm import clipped_lstm

DIM, CELLS = 6, 10


def directions_lstms() -> list[torch.nn.LSTM]:
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, CELLS, proj_size=DIM, batch_first=True) for _ in range(2)]
    for parameter in (p for lstm in lstms for p in lstm.parameters()):
        torch.nn.init.normal_(parameter, std=0.5)
    return lstms


@pytest.mark.parametrize("lengths", [[3, 7, 5, 3], [1], [4, 1], [6, 6, 6]], ids=str)
def test_unclipped_reference_equals_torchs_lstm_in_values_final_states_and_every_gradient(
    lengths,
):
    """Rows in any order, with padding, length-1 rows and a batch of one, from a given initial
    state: torch's LSTM over the packed rows gives the same outputs (zero past each length),
    state at each row's last position, and gradients w.r.t. the inputs, every parameter and
    the initial state and memory."""
    lstms = directions_lstms()
    lengths = torch.tensor(lengths)
    batch, timesteps = len(lengths), int(lengths.max())
    torch.manual_seed(1)
    inputs = torch.randn(2, batch, timesteps, DIM, requires_grad=True)
    state0 = torch.randn(2, batch, DIM, requires_grad=True)
    memory0 = torch.randn(2, batch, CELLS, requires_grad=True)
    weights = torch.randn(2, batch, timesteps, DIM)
    wrt = [inputs, state0, memory0, *(p for lstm in lstms for p in lstm.parameters())]

    def gradients(outputs, state, memory):
        loss = (outputs * weights).sum() + (state**2).sum() + (memory * 0.5).sum()
        return list(torch.autograd.grad(loss, wrt))

    outputs, (state, memory) = clipped_lstm(
        inputs, stacked_weights(lstms), lengths, Clips(), LstmState(state0, memory0)
    )
    ours = [outputs, state, memory, *gradients(outputs, state, memory)]
    theirs_outputs, theirs_states, theirs_memories = [], [], []
    for d, lstm in enumerate(lstms):
        packed = pack_padded_sequence(inputs[d], lengths, batch_first=True, enforce_sorted=False)
        out, (h_n, c_n) = lstm(packed, (state0[d].unsqueeze(0), memory0[d].unsqueeze(0)))
        padded, _ = pad_packed_sequence(out, batch_first=True, total_length=timesteps)
        theirs_outputs.append(padded)
        theirs_states.append(h_n[0])
        theirs_memories.append(c_n[0])
    theirs = [torch.stack(part) for part in (theirs_outputs, theirs_states, theirs_memories)]
    theirs += gradients(*theirs)
    for index, (got, want) in enumerate(zip(ours, theirs, strict=True)):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), index


def test_each_row_is_computed_as_if_alone_and_keeps_its_state_past_its_length():
    """Clipped, with padding: a row's outputs and final state are those of the row alone,
    truncated to its length; a row of length 0 hands back its initial state."""
    lstms = directions_lstms()
    lengths = torch.tensor([3, 7, 0, 5])
    torch.manual_seed(1)
    inputs = torch.randn(2, 4, 7, DIM)
    initial = LstmState(torch.randn(2, 4, DIM), torch.randn(2, 4, CELLS))
    clips = Clips(0.5, 0.3)
    outputs, final = clipped_lstm(inputs, stacked_weights(lstms), lengths, clips, initial)
    for row, length in enumerate(lengths.tolist()):
        alone, alone_final = clipped_lstm(
            inputs[:, row : row + 1, :length],
            stacked_weights(lstms),
            lengths[row : row + 1],
            clips,
            LstmState(*(part[:, row : row + 1] for part in initial)),
        )
        assert torch.allclose(outputs[:, row : row + 1, :length], alone, atol=1e-6)
        assert not outputs[:, row, length:].any()
        for got, want in zip(final, alone_final, strict=True):
            assert torch.allclose(got[:, row : row + 1], want, atol=1e-6)
    assert torch.equal(final.state[:, 2], initial.state[:, 2])
    assert outputs.abs().max() <= 0.3
