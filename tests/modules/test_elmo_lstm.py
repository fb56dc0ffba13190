import pytest
import torch

from elmo_plugin.modules.elmo_lstm import ElmoLstm, reverse_within_length

DIM = 6


def make_lstm(**kwargs) -> ElmoLstm:
    torch.manual_seed(0)
    return ElmoLstm(input_dim=DIM, hidden_dim=10, num_layers=2, return_all_layers=True, **kwargs).eval()


def padded_batch():
    torch.manual_seed(1)
    inputs = torch.randn(3, 7, DIM)
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4], dtype=torch.bool)
    return inputs, mask


def perturbed_at(inputs: torch.Tensor, position: int) -> torch.Tensor:
    changed = inputs.clone()
    changed[:, position] += 5.0
    return changed


@pytest.mark.parametrize("clips", [{}, {"cell_clip": 0.5, "proj_clip": 0.3}])
def test_no_future_token_leak_in_either_direction(clips):
    """Changing token t+1 leaves forward states up to t unchanged; changing t-1 leaves
    backward states from t on unchanged; in every layer, with padding in the batch."""
    lstm = make_lstm(**clips)
    inputs, mask = padded_batch()
    base = lstm(inputs, mask)
    real = mask.unsqueeze(-1)
    for t in range(6):
        for layer, new in zip(base, lstm(perturbed_at(inputs, t + 1), mask)):
            assert torch.equal(layer[:, : t + 1, :DIM], new[:, : t + 1, :DIM])
    for t in range(1, 7):
        for layer, new in zip(base, lstm(perturbed_at(inputs, t - 1), mask)):
            assert torch.equal((layer * real)[:, t:, DIM:], (new * real)[:, t:, DIM:])


def test_directions_do_see_their_own_context():
    lstm = make_lstm()
    inputs, mask = padded_batch()
    base = lstm(inputs, mask)[-1]
    changed = inputs.clone()
    changed[:, 0] += 5.0
    assert not torch.allclose(base[0, 4, :DIM], lstm(changed, mask)[-1][0, 4, :DIM])


@pytest.mark.parametrize("clips", [{}, {"cell_clip": 0.5, "proj_clip": 0.3}])
def test_padding_changes_nothing_and_state_is_not_carried(clips):
    lstm = make_lstm(**clips)
    inputs, mask = padded_batch()
    batched = lstm(inputs, mask)
    lstm(torch.randn(2, 4, DIM), torch.ones(2, 4, dtype=torch.bool))  # an unrelated batch in between
    for row, length in enumerate(mask.sum(1).tolist()):
        alone = lstm(inputs[row : row + 1, :length], mask[row : row + 1, :length])
        for layer_batched, layer_alone in zip(batched, alone):
            assert torch.allclose(layer_batched[row, :length], layer_alone[0], atol=1e-6)
            assert torch.all(layer_batched[row, length:] == 0)


def test_fused_and_clipped_paths_agree_when_clips_never_bind():
    fused = make_lstm()
    clipped = make_lstm(cell_clip=1e6, proj_clip=1e6)
    inputs, mask = padded_batch()
    for a, b in zip(fused(inputs, mask), clipped(inputs, mask)):
        assert torch.allclose(a, b, atol=1e-6)


def test_clipping_bounds_the_outputs():
    lstm = make_lstm(cell_clip=0.5, proj_clip=0.05)
    for p in lstm.parameters():
        torch.nn.init.constant_(p, 1.0)
    inputs, mask = padded_batch()
    assert lstm(inputs, mask)[0].abs().max() <= 0.05 + 1e-7


def test_shapes_and_top_layer_default():
    inputs, mask = padded_batch()
    top = ElmoLstm(DIM, 10, 3)(inputs, mask)
    assert top.shape == (3, 7, 2 * DIM)
    layers = ElmoLstm(DIM, 10, 3, return_all_layers=True)(inputs, mask)
    assert [layer.shape for layer in layers] == [(3, 7, 2 * DIM)] * 3


def test_reverse_within_length_keeps_padding_and_is_an_involution():
    index = reverse_within_length(torch.tensor([3, 5]), 5)
    assert index.tolist() == [[2, 1, 0, 3, 4], [4, 3, 2, 1, 0]]
    assert torch.equal(index.gather(1, index), torch.arange(5).expand(2, 5))
