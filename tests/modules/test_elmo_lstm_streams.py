"""`elmo_lstm`'s stateful streams: a window read in two halves with the state carried equals the
whole window (values and gradients within it), and the state carried out never holds a token
after the window, in either direction."""

import contextlib

import pytest
import torch

from elmo_plugin.cpu import packed_clipped_lstm as packed_module
from elmo_plugin.modules import elmo_lstm as elmo_lstm_module
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer

DIM = 6
CLIPS = [{}, {"cell_clip": 0.5, "proj_clip": 0.3}]


def make_lstm(**kwargs) -> ElmoLstmContextualizer:
    torch.manual_seed(0)
    return ElmoLstmContextualizer(input_dim=DIM, cell_size=10, num_layers=2, **kwargs).eval()


def streams(timesteps: int = 8) -> torch.Tensor:
    """(2 directions, 3 rows, timesteps, DIM): each direction its own text."""
    torch.manual_seed(1)
    return torch.randn(2, 3, timesteps, DIM, requires_grad=True)


def full_mask(inputs: torch.Tensor) -> torch.Tensor:
    return torch.ones(inputs.shape[1:3], dtype=torch.bool)


@pytest.mark.parametrize("clips", CLIPS)
def test_two_half_windows_with_carried_state_equal_one_full_window(clips):
    lstm = make_lstm(**clips)
    inputs = streams()
    whole, _ = lstm.stream_layers(inputs, full_mask(inputs))
    first, second = inputs[:, :, :4], inputs[:, :, 4:]
    halves_first, carried = lstm.stream_layers(first, full_mask(first))
    detached = [(h.detach(), c.detach()) for h, c in carried]
    halves_second, _ = lstm.stream_layers(second, full_mask(second), detached)
    for layer, a, b in zip(whole, halves_first, halves_second, strict=False):
        assert torch.allclose(layer, torch.cat([a, b], dim=1), atol=1e-6)
    # Gradients within each half window: a loss on the half's outputs, w.r.t. the half's inputs.
    weights = torch.randn_like(whole[-1][:, 4:])
    (grad_whole,) = torch.autograd.grad((whole[-1][:, 4:] * weights).sum(), inputs)
    (grad_half,) = torch.autograd.grad((halves_second[-1] * weights).sum(), inputs)
    assert torch.allclose(grad_whole[:, :, 4:], grad_half[:, :, 4:], atol=1e-6)
    assert torch.all(grad_half[:, :, :4] == 0)  # detached: nothing flows into the earlier window


@pytest.mark.parametrize("clips", CLIPS)
def test_zero_state_is_the_stateless_start(clips):
    lstm = make_lstm(**clips)
    inputs = streams()
    fresh, _ = lstm.stream_layers(inputs, full_mask(inputs))
    zero_state = [(torch.zeros(2, 3, DIM), torch.zeros(2, 3, 10)) for _ in range(2)]
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            fresh, lstm.stream_layers(inputs, full_mask(inputs), zero_state)[0], strict=False
        )
    )


@pytest.mark.parametrize("clips", CLIPS)
def test_no_future_token_leak_across_two_consecutive_windows(clips):
    """Windows k and k + 1 of each direction's stream: changing the input at any position of
    window k + 1 leaves every output of window k and the earlier outputs of window k + 1
    unchanged, in both directions and every layer (each direction reads its own stream)."""
    lstm = make_lstm(**clips)
    inputs = streams(10).detach()
    mask = full_mask(inputs[:, :, :5])

    def run(changed: torch.Tensor):
        first, state = lstm.stream_layers(changed[:, :, :5], mask)
        second, _ = lstm.stream_layers(changed[:, :, 5:], mask, state)
        return [torch.cat(pair, dim=1) for pair in zip(first, second, strict=False)]

    base = run(inputs)
    for t in range(1, 10):
        changed = inputs.clone()
        changed[:, :, t] += 5.0
        for layer, new in zip(base, run(changed), strict=False):
            assert torch.equal(layer[:, :t], new[:, :t])
            assert not torch.equal(layer[:, t:], new[:, t:])


def test_the_transformer_refuses_stateful_streams():
    from allennlp.common.checks import ConfigurationError

    from elmo_plugin.modules.elmo_transformer import ElmoTransformerContextualizer

    transformer = ElmoTransformerContextualizer(
        input_dim=DIM, num_layers=1, num_attention_heads=2, feedforward_hidden_dim=8
    )
    with pytest.raises(ConfigurationError, match="use the elmo_lstm contextualizer"):
        transformer.stream_layers(torch.zeros(2, 1, 3, DIM), torch.ones(1, 3, dtype=torch.bool))


@pytest.mark.parametrize("clips", CLIPS)
def test_streams_from_zero_state_equal_the_stateless_layers(clips):
    """Forward stream = the text, backward stream = the text reversed: the same numbers as
    `all_layers` on the text (whose backward half is at the text's positions)."""
    lstm = make_lstm(**clips)
    text = streams()[0].detach()
    mask = torch.ones(text.shape[:2], dtype=torch.bool)
    stateless = lstm.all_layers(text, mask)
    stream, _ = lstm.stream_layers(torch.stack([text, text.flip(1)]), mask)
    for plain, streamed in zip(stateless, stream, strict=False):
        assert torch.allclose(plain[..., :DIM], streamed[..., :DIM], atol=1e-6)
        assert torch.allclose(plain[..., DIM:], streamed[..., DIM:].flip(1), atol=1e-6)


@pytest.mark.parametrize("clips", CLIPS)
def test_fast_path_stream_layers_equal_the_reference_values_states_and_gradients(
    clips, monkeypatch
):
    """CPU float32 runs the CPU fast path from the carried state (`cpu_loop: "fast"`); against
    the reference loop: rows in any length order (one of length 1), a random carried state;
    the outputs, every row's state at its last position and the gradients w.r.t. the inputs
    and every parameter."""
    lstm = make_lstm(**clips)
    torch.manual_seed(2)
    inputs = torch.randn(2, 4, 7, DIM, requires_grad=True)
    mask = torch.arange(7) < torch.tensor([5, 7, 1, 6]).unsqueeze(1)
    state = [(torch.randn(2, 4, DIM) * 0.3, torch.randn(2, 4, 10) * 0.3) for _ in range(2)]
    weights = torch.randn(4, 7, 2 * DIM)

    def run():
        layers, final = lstm.stream_layers(inputs, mask, state)
        grads = torch.autograd.grad((layers[-1] * weights).sum(), [inputs, *lstm.parameters()])
        return layers, final, grads

    ran = []
    fast_path = packed_module.packed_clipped_lstm
    monkeypatch.setattr(
        packed_module,
        "packed_clipped_lstm",
        lambda *args: ran.append("fast") or fast_path(*args),
    )
    packed = run()
    assert ran == ["fast"] * 2
    lstm.cpu_loop = "reference"
    plain = run()
    assert ran == ["fast"] * 2
    for a, b in zip(packed[0], plain[0], strict=False):
        assert torch.allclose(a, b, atol=1e-6)
    for (h, c), (h_plain, c_plain) in zip(packed[1], plain[1], strict=False):
        assert torch.allclose(h, h_plain, atol=1e-6)
        assert torch.allclose(c, c_plain, atol=1e-6)
    for a, b in zip(packed[2], plain[2], strict=False):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("clips", CLIPS)
def test_a_carried_state_that_needs_a_gradient_passes_it_back_as_one_window_does(clips):
    """Not detached, the state carried from the first half window passes the second half's
    gradient back into the first half's inputs: the whole window's gradient (the reference
    loop runs such a state)."""
    lstm = make_lstm(**clips)
    inputs = streams()
    whole, _ = lstm.stream_layers(inputs, full_mask(inputs))
    first, second = inputs[:, :, :4], inputs[:, :, 4:]
    _, carried = lstm.stream_layers(first, full_mask(first))
    halves_second, _ = lstm.stream_layers(second, full_mask(second), carried)
    weights = torch.randn_like(whole[-1][:, 4:])
    wrt = [inputs, *lstm.parameters()]
    grad_whole = torch.autograd.grad((whole[-1][:, 4:] * weights).sum(), wrt)
    grad_halves = torch.autograd.grad((halves_second[-1] * weights).sum(), wrt)
    for got, want in zip(grad_halves, grad_whole, strict=False):
        assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("clips", CLIPS)
def test_packed_final_state_is_each_rows_state_at_its_last_position(clips):
    """A row with padding carries the state after its own last token: reading it on from there
    equals reading the row's real tokens and the next ones in one window."""
    lstm = make_lstm(**clips)
    inputs = streams(timesteps=8).detach()
    short = torch.arange(5) < torch.tensor([5, 3, 4]).unsqueeze(1)
    _, carried = lstm.stream_layers(inputs[:, :, :5], short)
    for row, length in enumerate([5, 3, 4]):
        whole, _ = lstm.stream_layers(
            torch.cat([inputs[:, row : row + 1, :length], inputs[:, row : row + 1, 5:]], dim=2),
            torch.ones(1, length + 3, dtype=torch.bool),
        )
        state = [(h[:, row : row + 1], c[:, row : row + 1]) for h, c in carried]
        rest, _ = lstm.stream_layers(
            inputs[:, row : row + 1, 5:], torch.ones(1, 3, dtype=torch.bool), state
        )
        assert torch.allclose(whole[-1][:, length:], rest[-1], atol=1e-6)


def test_gpu_path_stream_layers_equal_the_reference_with_a_carried_state_that_needs_a_gradient(
    monkeypatch,
):
    """The GPU's whole-sequence function (`gpu_path_on_cpu`) against the reference loop, clips
    binding: rows of lengths 5, 7, 0 and 1 from a random carried state that needs a gradient;
    the outputs, every row's final state and the gradients w.r.t. the inputs, every parameter
    and the carried state."""
    ran = []
    whole_sequence = elmo_lstm_module.sequence_clipped_lstm
    monkeypatch.setattr(
        elmo_lstm_module,
        "sequence_clipped_lstm",
        lambda *args: ran.append("gpu") or whole_sequence(*args),
    )
    results = []
    for path in ("gpu", "reference"):
        lstm = make_lstm(
            cell_clip=0.5, proj_clip=0.3, cpu_loop="fast" if path == "gpu" else "reference"
        )
        torch.manual_seed(2)
        inputs = torch.randn(2, 4, 7, DIM, requires_grad=True)
        mask = torch.arange(7) < torch.tensor([5, 7, 0, 1]).unsqueeze(1)
        state = [
            (torch.randn(2, 4, DIM).requires_grad_(), torch.randn(2, 4, 10).requires_grad_())
            for _ in range(2)
        ]
        with gpu_path_on_cpu() if path == "gpu" else contextlib.nullcontext():
            layers, final = lstm.stream_layers(inputs, mask, state)
        values = [*layers, *(part for layer in final for part in layer)]
        loss = sum((value * torch.linspace(-1, 1, value.size(-1))).sum() for value in values)
        wrt = [inputs, *lstm.parameters(), *(part for layer in state for part in layer)]
        results.append([*values, *torch.autograd.grad(loss, wrt)])
    assert ran == ["gpu"] * 2
    for index, (got, want) in enumerate(zip(*results, strict=True)):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), index
