import contextlib
import logging
from typing import Any, Optional, cast

import pytest
import torch

from elmo_plugin.cpu import compiled_lstm_steps as compiled_module
from elmo_plugin.cpu import packed_clipped_lstm as packed_module
from elmo_plugin.cpu.lstm_tensors import stacked_weights
from elmo_plugin.modules import elmo_lstm as elmo_lstm_module
from elmo_plugin.modules.clipped_lstm import initial_state
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.modules.directions import gather_timesteps, reverse_within_length
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer

DIM = 6


def make_lstm(**kwargs) -> ElmoLstmContextualizer:
    torch.manual_seed(0)
    return ElmoLstmContextualizer(
        input_dim=DIM, cell_size=10, num_layers=2, return_all_layers=True, **kwargs
    ).eval()


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
        for layer, new in zip(base, lstm(perturbed_at(inputs, t + 1), mask), strict=False):
            assert torch.equal(layer[:, : t + 1, :DIM], new[:, : t + 1, :DIM])
    for t in range(1, 7):
        for layer, new in zip(base, lstm(perturbed_at(inputs, t - 1), mask), strict=False):
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
    lstm(
        torch.randn(2, 4, DIM), torch.ones(2, 4, dtype=torch.bool)
    )  # an unrelated batch in between
    for row, length in enumerate(mask.sum(1).tolist()):
        alone = lstm(inputs[row : row + 1, :length], mask[row : row + 1, :length])
        for layer_batched, layer_alone in zip(batched, alone, strict=False):
            assert torch.allclose(layer_batched[row, :length], layer_alone[0], atol=1e-6)
            assert torch.all(layer_batched[row, length:] == 0)


def reference_clipped_lstm(
    lstm: Any,  # a torch.nn.LSTM (typed Any: torch types its weights as Tensor | Module)
    inputs: torch.Tensor,
    cell_clip: Optional[float],
    proj_clip: Optional[float],
) -> torch.Tensor:
    """One direction, step by step over every timestep, padding included."""
    state = inputs.new_zeros(inputs.size(0), lstm.proj_size)
    memory = inputs.new_zeros(inputs.size(0), lstm.hidden_size)
    outputs = []
    for step in range(inputs.size(1)):
        gates = torch.nn.functional.linear(inputs[:, step], lstm.weight_ih_l0, lstm.bias_ih_l0)
        gates = gates + torch.nn.functional.linear(state, lstm.weight_hh_l0, lstm.bias_hh_l0)
        input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)
        memory = torch.sigmoid(forget_gate) * memory + torch.sigmoid(input_gate) * torch.tanh(
            candidate
        )
        memory = memory.clamp(-cell_clip, cell_clip) if cell_clip is not None else memory
        state = torch.nn.functional.linear(
            torch.sigmoid(output_gate) * torch.tanh(memory), lstm.weight_hr_l0
        )
        state = state.clamp(-proj_clip, proj_clip) if proj_clip is not None else state
        outputs.append(state)
    return torch.stack(outputs, dim=1)


def reference_layers(
    lstm: ElmoLstmContextualizer, inputs: torch.Tensor, mask: torch.BoolTensor
) -> list[torch.Tensor]:
    """The straightforward computation (no dropout): each direction on its own, batch in input
    order, every timestep; torch's LSTM itself when nothing is clipped."""
    reverse_index = reverse_within_length(mask.sum(dim=1), mask.size(1))
    forward_input, backward_input = inputs, gather_timesteps(inputs, reverse_index)
    layers = []
    for index, pair in enumerate(zip(lstm.forward_layers, lstm.backward_layers, strict=False)):
        if lstm.cell_clip is None and lstm.proj_clip is None:
            forward_output, backward_output = pair[0](forward_input)[0], pair[1](backward_input)[0]
        else:
            forward_output = reference_clipped_lstm(
                pair[0], forward_input, lstm.cell_clip, lstm.proj_clip
            )
            backward_output = reference_clipped_lstm(
                pair[1], backward_input, lstm.cell_clip, lstm.proj_clip
            )
        if index > 0:
            forward_output, backward_output = (
                forward_output + forward_input,
                backward_output + backward_input,
            )
        layer = torch.cat(
            [forward_output, gather_timesteps(backward_output, reverse_index)], dim=-1
        )
        layers.append(layer * mask.unsqueeze(-1))
        forward_input, backward_input = forward_output, backward_output
    return layers


def on_path(path: str) -> contextlib.AbstractContextManager:
    """Where the CPU runs the GPU's paths ("gpu"), else nothing changed."""
    return gpu_path_on_cpu() if path == "gpu" else contextlib.nullcontext()


@pytest.mark.parametrize("path", ["fast", "reference", "gpu"])
@pytest.mark.parametrize(
    "clips", [{}, {"cell_clip": 0.5, "proj_clip": 0.3}, {"cell_clip": 0.5}, {"proj_clip": 0.3}]
)
def test_equals_the_straightforward_computation_in_values_and_gradients(clips, path):
    """Both directions in one loop, batch sorted by length, through the CPU fast path, the
    reference loop (`cpu_loop: "reference"`) or the GPU's whole-sequence function: the same layers
    and gradients (inputs and every parameter) as each direction's LSTM step by step, with
    padding and an empty row."""
    torch.manual_seed(0)
    cpu_loop = "reference" if path == "reference" else "fast"
    lstm = ElmoLstmContextualizer(
        DIM, 10, 3, return_all_layers=True, cpu_loop=cpu_loop, **clips
    ).train()  # dropout 0
    for parameter in lstm.parameters():
        torch.nn.init.normal_(parameter, std=0.5)  # large enough that clipping binds
    inputs = torch.randn(5, 7, DIM, requires_grad=True)
    lengths = torch.tensor([3, 7, 0, 5, 3])
    mask = torch.arange(7) < lengths.unsqueeze(1)
    with on_path(path):
        actual = lstm(inputs, mask)
    expected = reference_layers(lstm, inputs, mask)
    for got, want in zip(actual, expected, strict=False):
        assert torch.allclose(got, want, atol=1e-6)
    weights = [torch.randn_like(layer) for layer in actual]
    wrt = [inputs, *lstm.parameters()]
    actual_grads = torch.autograd.grad(
        sum((layer * w).sum() for layer, w in zip(actual, weights, strict=False)), wrt
    )
    expected_grads = torch.autograd.grad(
        sum((layer * w).sum() for layer, w in zip(expected, weights, strict=False)), wrt
    )
    for got, want in zip(actual_grads, expected_grads, strict=False):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("clips", [{}, {"cell_clip": 0.5, "proj_clip": 0.3}])
def test_training_dropout_draws_a_mask_per_direction(clips):
    """With both stacks tied and one-token sentences (read alike both ways), the directions agree
    in eval mode; in training mode each direction's input dropout differs, in every layer."""
    lstm = make_lstm(dropout=0.5, **clips)
    lstm.backward_layers.load_state_dict(lstm.forward_layers.state_dict())
    inputs, mask = torch.randn(4, 1, DIM), torch.ones(4, 1, dtype=torch.bool)
    for layer in lstm.eval()(inputs, mask):
        assert torch.allclose(layer[..., :DIM], layer[..., DIM:], atol=1e-6)
    torch.manual_seed(3)
    for layer in lstm.train()(inputs, mask):
        assert (layer[..., :DIM] - layer[..., DIM:]).abs().amax(dim=-1).min() > 1e-4


def test_fused_and_clipped_paths_agree_when_clips_never_bind():
    fused = make_lstm()
    clipped = make_lstm(cell_clip=1e6, proj_clip=1e6)
    inputs, mask = padded_batch()
    for a, b in zip(fused(inputs, mask), clipped(inputs, mask), strict=False):
        assert torch.allclose(a, b, atol=1e-6)


def test_clipping_bounds_the_outputs():
    lstm = make_lstm(cell_clip=0.5, proj_clip=0.05)
    for p in lstm.parameters():
        torch.nn.init.constant_(p, 1.0)
    inputs, mask = padded_batch()
    assert lstm(inputs, mask)[0].abs().max() <= 0.05 + 1e-7


def test_shapes_and_top_layer_default():
    inputs, mask = padded_batch()
    top = ElmoLstmContextualizer(DIM, 10, 3)(inputs, mask)
    assert top.shape == (3, 7, 2 * DIM)
    layers = ElmoLstmContextualizer(DIM, 10, 3, return_all_layers=True)(inputs, mask)
    assert [layer.shape for layer in layers] == [(3, 7, 2 * DIM)] * 3


def test_reverse_within_length_keeps_padding_and_is_an_involution():
    index = reverse_within_length(torch.tensor([3, 5]), 5)
    assert index.tolist() == [[2, 1, 0, 3, 4], [4, 3, 2, 1, 0]]
    assert torch.equal(index.gather(1, index), torch.arange(5).expand(2, 5))


def test_memory_cells_stay_float32_under_bf16_autocast():
    lstm = make_lstm(cell_clip=3.0, proj_clip=3.0)
    inputs, mask = padded_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layers = lstm(inputs, mask)
        state, memory = initial_state(
            torch.zeros(2, 3, 7, DIM, dtype=torch.bfloat16), stacked_weights(lstm.forward_layers)
        )
    assert (state.dtype, memory.dtype) == (torch.bfloat16, torch.float32)
    for got, want in zip(layers, lstm(inputs, mask), strict=False):
        assert (got.float() - want).abs().max() < 0.05


def test_hidden_dim_is_still_accepted_as_the_old_name_of_cell_size():
    from allennlp.common import Params
    from allennlp.common.checks import ConfigurationError
    from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

    old = Seq2SeqEncoder.from_params(
        Params({"type": "elmo_lstm", "input_dim": DIM, "hidden_dim": 10, "num_layers": 1})
    )
    new = Seq2SeqEncoder.from_params(
        Params({"type": "elmo_lstm", "input_dim": DIM, "cell_size": 10, "num_layers": 1})
    )
    assert old.cell_size == new.cell_size == 10
    assert old.state_dict().keys() == new.state_dict().keys()
    both = {"type": "elmo_lstm", "input_dim": DIM, "cell_size": 10, "hidden_dim": 10}
    with pytest.raises(ConfigurationError, match="elmo_lstm: give cell_size .* exactly once"):
        Seq2SeqEncoder.from_params(Params(both))


def counting_paths(monkeypatch) -> list[str]:
    """The list that records which clipped LSTM path each layer ran: "fast", "reference" or
    "gpu"."""
    ran: list[str] = []
    fast, reference = packed_module.packed_clipped_lstm, elmo_lstm_module.clipped_lstm
    monkeypatch.setattr(
        elmo_lstm_module,
        "sequence_clipped_lstm",
        recording(ran, "gpu", elmo_lstm_module.sequence_clipped_lstm),
    )
    monkeypatch.setattr(
        packed_module,
        "packed_clipped_lstm",
        recording(ran, "fast", fast),
    )
    monkeypatch.setattr(
        elmo_lstm_module,
        "clipped_lstm",
        recording(ran, "reference", reference),
    )
    return ran


def recording(calls: list, name: str, function: Any) -> Any:
    """`function`, appending `name` to `calls` on every call."""

    def run(*args, **kwargs):
        calls.append(name)
        return function(*args, **kwargs)

    return run


def from_config(**keys) -> ElmoLstmContextualizer:
    from allennlp.common import Params
    from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

    config = {"type": "elmo_lstm", "input_dim": DIM, "cell_size": 10, "num_layers": 2}
    config.update(cell_clip=0.5, proj_clip=0.3, return_all_layers=True, **keys)
    torch.manual_seed(0)
    return cast(ElmoLstmContextualizer, Seq2SeqEncoder.from_params(Params(config)))


def layers_and_gradients(lstm: ElmoLstmContextualizer) -> list[torch.Tensor]:
    inputs, mask = padded_batch()
    inputs.requires_grad_()
    layers = lstm(inputs, mask)
    loss = sum((layer * torch.linspace(-1, 1, layer.size(-1))).sum() for layer in layers)
    return [*layers, *torch.autograd.grad(loss, [inputs, *lstm.parameters()])]


def test_cpu_loop_in_a_config_runs_the_reference_loop_or_the_fast_path_with_the_same_numbers(
    monkeypatch,
):
    """`cpu_loop: "reference"` runs the reference loop for every layer, the default, "fast", the
    CPU fast path; where the CPU runs the GPU's paths, either runs the GPU's whole-sequence
    function. The same layers and gradients within float32 rounding."""
    ran = counting_paths(monkeypatch)
    reference = layers_and_gradients(from_config(cpu_loop="reference"))
    assert ran == ["reference"] * 2
    for cpu_loop, path in [("fast", "fast"), ("fast", "gpu"), ("reference", "gpu")]:
        ran.clear()
        with on_path(path):
            other = layers_and_gradients(from_config(cpu_loop=cpu_loop))
        assert ran == [path] * 2
        for got, want in zip(other, reference, strict=True):
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


def test_an_unknown_cpu_loop_is_a_configuration_error():
    from allennlp.common.checks import ConfigurationError

    with pytest.raises(ConfigurationError, match='cpu_loop must be "fast" or "reference", got'):
        from_config(cpu_loop="c++")


def test_the_dropped_cpu_loop_gpu_reads_as_the_default():
    """`cpu_loop: "gpu"` (it ran the GPU's function on a CPU) in an older config or archive: the
    default, the CPU fast path."""
    assert from_config(cpu_loop="gpu").cpu_loop == "fast"


def test_a_failed_cpp_build_warns_once_and_runs_the_reference_loop_with_its_numbers(
    monkeypatch, caplog
):
    """Where the C++ loops cannot be built, one warning (for the whole process, however many
    layers and batches) and the reference loop, whose numbers the fast path's equal."""
    import functools

    from torch.utils import cpp_extension

    fast = layers_and_gradients(from_config())

    def no_compiler(**kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    unbuilt = functools.cache(compiled_module.compiled_steps.__wrapped__)
    monkeypatch.setattr(packed_module, "compiled_steps", unbuilt)
    ran = counting_paths(monkeypatch)
    with caplog.at_level(logging.WARNING):
        fallback = layers_and_gradients(from_config())
        layers_and_gradients(from_config())
    assert ran == ["reference"] * 4
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "could not be built" in warnings[0].getMessage()
    for got, want in zip(fallback, fast, strict=False):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
