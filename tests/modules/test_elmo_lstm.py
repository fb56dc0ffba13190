from typing import Optional

import pytest
import torch

from elmo_plugin.cpu import distinct_rows as distinct_rows_module
from elmo_plugin.cpu import onednn_matmul as onednn_matmul_module
from elmo_plugin.cpu import packed_clipped_lstm as packed_module
from elmo_plugin.cpu import side_by_side as side_by_side_module
from elmo_plugin.modules.directions import gather_timesteps, reverse_within_length
from elmo_plugin.modules.elmo_lstm import (
    ElmoLstmContextualizer,
    clipped_lstm,
    clipped_lstm_fixed_shape,
    initial_state,
    packed_weights,
)
from elmo_plugin.cpu.packed_clipped_lstm import packed_clipped_lstm
from elmo_plugin.cpu.side_by_side import side_by_side

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
    lstm(
        torch.randn(2, 4, DIM), torch.ones(2, 4, dtype=torch.bool)
    )  # an unrelated batch in between
    for row, length in enumerate(mask.sum(1).tolist()):
        alone = lstm(inputs[row : row + 1, :length], mask[row : row + 1, :length])
        for layer_batched, layer_alone in zip(batched, alone):
            assert torch.allclose(layer_batched[row, :length], layer_alone[0], atol=1e-6)
            assert torch.all(layer_batched[row, length:] == 0)


def reference_clipped_lstm(
    lstm: torch.nn.LSTM,
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
    for index, pair in enumerate(zip(lstm.forward_layers, lstm.backward_layers)):
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


@pytest.mark.parametrize("clips", [{}, {"cell_clip": 0.5, "proj_clip": 0.3}, {"cell_clip": 0.5}])
def test_equals_the_straightforward_computation_in_values_and_gradients(clips):
    """Both directions in one loop, batch sorted by length, finished sequences leaving the loop:
    same layers and same gradients (inputs and every parameter) as the plain computation."""
    torch.manual_seed(0)
    lstm = ElmoLstmContextualizer(DIM, 10, 3, return_all_layers=True, **clips).train()  # dropout 0
    for parameter in lstm.parameters():
        torch.nn.init.normal_(parameter, std=0.5)  # large enough that clipping binds
    inputs = torch.randn(5, 7, DIM, requires_grad=True)
    lengths = torch.tensor([3, 7, 0, 5, 3])
    mask = torch.arange(7) < lengths.unsqueeze(1)
    actual, expected = lstm(inputs, mask), reference_layers(lstm, inputs, mask)
    for got, want in zip(actual, expected):
        assert torch.allclose(got, want, atol=1e-6)
    weights = [torch.randn_like(layer) for layer in actual]
    wrt = [inputs, *lstm.parameters()]
    actual_grads = torch.autograd.grad(sum((l * w).sum() for l, w in zip(actual, weights)), wrt)
    expected_grads = torch.autograd.grad(sum((l * w).sum() for l, w in zip(expected, weights)), wrt)
    for got, want in zip(actual_grads, expected_grads):
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
    top = ElmoLstmContextualizer(DIM, 10, 3)(inputs, mask)
    assert top.shape == (3, 7, 2 * DIM)
    layers = ElmoLstmContextualizer(DIM, 10, 3, return_all_layers=True)(inputs, mask)
    assert [layer.shape for layer in layers] == [(3, 7, 2 * DIM)] * 3


def test_reverse_within_length_keeps_padding_and_is_an_involution():
    index = reverse_within_length(torch.tensor([3, 5]), 5)
    assert index.tolist() == [[2, 1, 0, 3, 4], [4, 3, 2, 1, 0]]
    assert torch.equal(index.gather(1, index), torch.arange(5).expand(2, 5))


@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1]])
@pytest.mark.parametrize("clips", [{"cell_clip": 0.5, "proj_clip": 0.3}, {"cell_clip": 0.5}])
def test_gpu_fixed_shape_loop_equals_the_shrinking_loop_in_values_and_gradients(lengths, clips):
    """The GPU path (every step over the whole batch, padding zeroed afterwards) gives the CPU
    path's outputs and gradients, with padding, length-1 sentences and a batch of one."""
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    for parameter in (p for lstm in lstms for p in lstm.parameters()):
        torch.nn.init.normal_(parameter, std=0.5)  # large enough that clipping binds
    lengths = torch.tensor(lengths)
    inputs = torch.randn(2, len(lengths), int(lengths.max()), DIM, requires_grad=True)
    cell_clip, proj_clip = clips["cell_clip"], clips.get("proj_clip")
    shrinking = clipped_lstm(inputs, lstms, lengths, cell_clip, proj_clip)
    fixed = clipped_lstm_fixed_shape(inputs, lstms, lengths, cell_clip, proj_clip)
    assert torch.allclose(fixed, shrinking, atol=1e-6)
    weights = torch.randn_like(fixed)
    wrt = [inputs, *(p for lstm in lstms for p in lstm.parameters())]
    for got, want in zip(
        torch.autograd.grad((fixed * weights).sum(), wrt),
        torch.autograd.grad((shrinking * weights).sum(), wrt),
    ):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


def test_memory_cells_stay_float32_under_bf16_autocast():
    lstm = make_lstm(cell_clip=3.0, proj_clip=3.0)
    inputs, mask = padded_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layers = lstm(inputs, mask)
        state, memory = initial_state(
            torch.zeros(2, 3, 7, DIM, dtype=torch.bfloat16), lstm.forward_layers
        )
    assert (state.dtype, memory.dtype) == (torch.bfloat16, torch.float32)
    for got, want in zip(layers, lstm(inputs, mask)):
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
    with pytest.raises(ConfigurationError, match="exactly once"):
        ElmoLstmContextualizer(DIM, cell_size=10, hidden_dim=10)


@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1], [6, 6, 6], [0, 0]])
@pytest.mark.parametrize(
    "clips", [{"cell_clip": 0.5, "proj_clip": 0.3}, {"cell_clip": 0.5}, {"proj_clip": 0.3}]
)
def test_packed_hand_differentiated_lstm_equals_the_step_loop_in_values_and_gradients(
    lengths, clips
):
    """The CPU fast path (packed positions, hand-written backward) gives the autograd step loop's
    outputs and gradients (inputs and every weight), with padding, length-1 sentences, a batch of
    one and an all-padding batch; its outputs are zero past each length."""
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    for parameter in (p for lstm in lstms for p in lstm.parameters()):
        torch.nn.init.normal_(parameter, std=0.5)  # large enough that clipping binds
    lengths = torch.tensor(lengths)
    inputs = torch.randn(2, len(lengths), max(int(lengths.max()), 1), DIM, requires_grad=True)
    cell_clip, proj_clip = clips.get("cell_clip"), clips.get("proj_clip")
    loop = clipped_lstm(inputs, lstms, lengths, cell_clip, proj_clip)
    packed, _ = packed_clipped_lstm(inputs, packed_weights(lstms), lengths, cell_clip, proj_clip)
    assert torch.allclose(packed, loop, atol=1e-6)
    if clips.get("proj_clip"):
        assert packed.abs().max() <= clips["proj_clip"]
    if not lengths.any():
        assert not packed.any()
        return
    weights = torch.randn_like(loop)
    wrt = [inputs, *(p for lstm in lstms for p in lstm.parameters())]
    got = torch.autograd.grad((packed * weights).sum(), wrt, allow_unused=True)
    want = torch.autograd.grad((loop * weights).sum(), wrt, allow_unused=True)
    for name, a, b in zip(
        ["inputs", *(n for lstm in lstms for n, _ in lstm.named_parameters())], got, want
    ):
        a = torch.zeros_like(wrt[0]) if a is None else a
        b = torch.zeros_like(a) if b is None else b
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), name


def test_packed_lstm_gradients_reach_every_weight_contiguous_in_its_own_layout():
    """The hand-written backward hands each LSTM weight a gradient laid out like the weight, so
    accumulating it (`AccumulateGrad`) needs no strided copy."""
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    arriving = {}
    for index, lstm in enumerate(lstms):
        for name, parameter in lstm.named_parameters():
            parameter.register_hook(lambda grad, key=(index, name): arriving.setdefault(key, grad))
    inputs = torch.randn(2, 3, 4, DIM)
    packed_clipped_lstm(inputs, packed_weights(lstms), torch.tensor([4, 2, 1]), 0.5, 0.3)[
        0
    ].sum().backward()
    assert len(arriving) == 2 * 5
    for (index, name), grad in arriving.items():
        assert grad.shape == getattr(lstms[index], name).shape and grad.is_contiguous(), name


def test_clip_gradient_mask_in_one_op_equals_autograd_through_the_clamp():
    """`passed_by_clamp` (hardtanh's backward, in place, on a strided view as the backward loop
    uses it) gives what autograd gives through clamp(-clip, clip): zero where it bound, exactly
    at the bound included."""
    torch.manual_seed(0)
    values = torch.randn(5, 8) * 2
    values[0, :3] = torch.tensor([0.5, -0.5, 0.4999])  # at and just inside the bound
    leaf = values.clone().requires_grad_()
    grad = torch.randn(5, 8)
    leaf.clamp(-0.5, 0.5).backward(grad)
    buffer = torch.randn(5, 16)
    view = buffer[:, 4:12]
    view.copy_(grad)
    packed_module.passed_by_clamp(view, values.clamp(-0.5, 0.5), 0.5)
    assert torch.equal(view, leaf.grad)
    assert torch.count_nonzero(view[0, :2]) == 0 and view[0, 2] == grad[0, 2]


@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1], [0, 0]])
def test_packed_lstm_without_a_backward_pass_gives_the_same_outputs_and_final_states(lengths):
    """Inference keeps only one step of the packed LSTM's intermediates: the same outputs and final
    (state, memory) as when every step is kept for the backward pass, from a given initial state."""
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    lengths = torch.tensor(lengths)
    inputs = torch.randn(2, len(lengths), max(int(lengths.max()), 1), DIM)
    initial = (torch.randn(2, len(lengths), DIM), torch.randn(2, len(lengths), 10))
    training = packed_clipped_lstm(
        inputs.requires_grad_(), packed_weights(lstms), lengths, 0.5, 0.3, initial
    )
    with torch.no_grad():
        inference = packed_clipped_lstm(inputs, packed_weights(lstms), lengths, 0.5, 0.3, initial)
    for got, want in zip([inference[0], *inference[1]], [training[0], *training[1]]):
        assert not got.requires_grad and torch.allclose(got, want.detach(), atol=1e-6)


@pytest.mark.parametrize("onednn", [True, False])
@pytest.mark.parametrize("colliding_hashes", [False, True])
@pytest.mark.parametrize("vectors", [2, None])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [4, 1], [1]])
def test_packed_lstm_inference_computes_input_gates_once_per_distinct_input_vector(
    lengths, vectors, colliding_hashes, onednn, monkeypatch
):
    """Where the inputs repeat a few vectors (a first layer sees one per token type), inference
    computes x W_ih + b once per distinct vector for each direction and each step gathers its
    rows: the step loop's outputs and the training path's final states, also from a given
    initial state, with oneDNN (the compiled loop) and without (the Python loop). All-different
    inputs (and fewer than 4/3 positions per distinct vector) keep the matmul over every
    position, also when every row hashes alike (the rows themselves are then counted)."""
    if not onednn:
        monkeypatch.setattr(onednn_matmul_module, "onednn_built", lambda: False)
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    lengths = torch.tensor(lengths)
    shape = (2, len(lengths), int(lengths.max()))
    # vectors taken in turn along each row: every one of them sits at a real position
    which = torch.arange(shape[0] * shape[1] * shape[2]).view(shape) % (vectors or 1)
    inputs = torch.randn(*shape, DIM) if vectors is None else torch.randn(vectors, DIM)[which]
    if colliding_hashes:
        monkeypatch.setattr(distinct_rows_module, "hash_powers", lambda width: [0] * width)
    rows_multiplied: list[int] = []
    plain_linear = packed_module.linear
    monkeypatch.setattr(
        packed_module,
        "linear",
        lambda x, *rest: rows_multiplied.append(len(x)) or plain_linear(x, *rest),
    )
    with torch.no_grad():
        packed, final = packed_clipped_lstm(inputs, packed_weights(lstms), lengths, 0.5, 0.3)
    positions = int(lengths.sum())
    shared = vectors is not None and 4 * vectors <= 3 * positions
    assert rows_multiplied == ([vectors] if shared else [positions]) * 2
    assert torch.allclose(packed, clipped_lstm(inputs, lstms, lengths, 0.5, 0.3), atol=1e-6)
    _, training_final = packed_clipped_lstm(
        inputs.clone().requires_grad_(), packed_weights(lstms), lengths, 0.5, 0.3
    )
    for got, want in zip(final, training_final):
        assert torch.allclose(got, want.detach(), atol=1e-6)
    initial = (torch.randn(2, len(lengths), DIM), torch.randn(2, len(lengths), 10))
    with torch.no_grad():
        from_initial = packed_clipped_lstm(
            inputs, packed_weights(lstms), lengths, 0.5, 0.3, initial
        )
    training = packed_clipped_lstm(
        inputs.clone().requires_grad_(), packed_weights(lstms), lengths, 0.5, 0.3, initial
    )
    for got, want in zip([from_initial[0], *from_initial[1]], [training[0], *training[1]]):
        assert torch.allclose(got, want.detach(), atol=1e-6)


def two_directions_counting_side_by_side(
    lengths: list[int], with_initial: bool, monkeypatch, repeated: bool = False
):
    """Two directions' LSTMs, a batch of the given lengths (inputs all different, or two vectors
    repeated), an initial state or None, and the list that records each side_by_side call's
    number of tasks."""
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    lengths = torch.tensor(lengths)
    shape = (2, len(lengths), max(int(lengths.max()), 1))
    which = torch.arange(shape[0] * shape[1] * shape[2]).view(shape) % 2
    inputs = torch.randn(2, DIM)[which] if repeated else torch.randn(*shape, DIM)
    initial = (
        (torch.randn(2, len(lengths), DIM), torch.randn(2, len(lengths), 10))
        if with_initial
        else None
    )
    calls: list[int] = []
    monkeypatch.setattr(
        side_by_side_module,
        "side_by_side",
        lambda tasks: calls.append(len(tasks)) or side_by_side(tasks),
    )
    return lstms, lengths, inputs, initial, calls


@pytest.mark.parametrize("repeated", [False, True])
@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1], [0, 0]])
def test_packed_lstm_inference_with_each_direction_on_its_own_thread_equals_one_loop(
    lengths, with_initial, grad_mode, repeated, monkeypatch
):
    """With 2 torch threads, inference runs the two directions' loops side by side on two threads:
    the same outputs and final (state, memory) as the directions in turn on 1 thread,
    with padding, length-1 and empty rows, a batch of one, under no_grad and inference_mode,
    with all-different and with repeated input vectors (each step gathering its gates)."""
    lstms, lengths, inputs, initial, calls = two_directions_counting_side_by_side(
        lengths, with_initial, monkeypatch, repeated
    )
    results = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        with grad_mode():
            results[threads] = packed_clipped_lstm(
                inputs, packed_weights(lstms), lengths, 0.5, 0.3, initial
            )
    assert torch.get_num_threads() == 2
    assert calls == ([2] if int(lengths.max()) > 0 else [])
    one_loop, two_threads = results[1], results[2]
    for got, want in zip([two_threads[0], *two_threads[1]], [one_loop[0], *one_loop[1]]):
        assert torch.allclose(got, want, atol=1e-6, rtol=0)


def test_packed_lstm_keeps_one_loop_where_torchs_threads_are_not_openmps(monkeypatch):
    """torch's native thread pool has one process-wide size: there the directions stay in one loop."""
    monkeypatch.setattr(side_by_side_module, "openmp_backend", lambda: False)
    monkeypatch.setattr(
        side_by_side_module, "side_by_side", lambda tasks: pytest.fail("ran side by side")
    )
    torch.set_num_threads(2)
    lstms = [torch.nn.LSTM(DIM, 10, proj_size=DIM, batch_first=True) for _ in range(2)]
    with torch.no_grad():
        outputs, _ = packed_clipped_lstm(
            torch.randn(2, 3, 4, DIM), packed_weights(lstms), torch.tensor([4, 2, 1]), 0.5, 0.3
        )
    assert outputs.shape == (2, 3, 4, DIM)


@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1]])
def test_packed_lstm_training_with_each_direction_on_its_own_thread_equals_one_thread(
    lengths, with_initial, monkeypatch
):
    """With 2 torch threads the forward and the hand-written backward run the two directions side
    by side: the same outputs, final states and gradients (inputs and every weight) as on 1 thread."""
    lstms, lengths, inputs, initial, calls = two_directions_counting_side_by_side(
        lengths, with_initial, monkeypatch
    )
    inputs.requires_grad_()
    results = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        outputs, (state, memory) = packed_clipped_lstm(
            inputs, packed_weights(lstms), lengths, 0.5, 0.3, initial
        )
        loss = (outputs * torch.linspace(-1, 1, outputs.size(-1))).sum() + (state**2).sum()
        parameters = [inputs, *(p for lstm in lstms for p in lstm.parameters())]
        results[threads] = [outputs, state, memory, *torch.autograd.grad(loss, parameters)]
    assert calls == [2, 2]  # the forward and the backward, on 2 threads only
    for got, want in zip(results[2], results[1]):
        assert torch.allclose(got, want, atol=1e-6, rtol=0)


@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1]])
def test_packed_lstm_time_loops_compiled_by_torchscript_equal_them_run_as_python(
    lengths, with_initial, monkeypatch
):
    """The packed LSTM's time loops, forward and backward, run compiled by TorchScript (the
    forward in C++ where it builds: `test_compiled_lstm_steps`): the same outputs, final states
    and gradients (inputs and every weight) as the same loops run as Python, with padding,
    length-1 rows, a batch of one and an initial state."""
    assert isinstance(packed_module.scripted(packed_module.forward_steps), torch.jit.ScriptFunction)
    assert isinstance(
        packed_module.scripted(packed_module.backward_steps), torch.jit.ScriptFunction
    )
    lstms, lengths, inputs, initial, _ = two_directions_counting_side_by_side(
        lengths, with_initial, monkeypatch
    )
    inputs.requires_grad_()
    monkeypatch.setattr(packed_module, "compiled_forward_steps", lambda: None)
    compiled = packed_module.scripted
    results = {}
    for mode, scripted in (("python", lambda loop: loop), ("torchscript", compiled)):
        monkeypatch.setattr(packed_module, "scripted", scripted)
        results[mode] = outputs_and_gradients(lstms, lengths, inputs, initial)
    for got, want in zip(results["torchscript"], results["python"]):
        assert torch.equal(got, want)


def outputs_and_gradients(lstms, lengths, inputs, initial, clips=(0.5, 0.3)) -> list[torch.Tensor]:
    """The packed LSTM's outputs, final (state, memory) and gradients (inputs and every weight)
    for a fixed loss, then its inference outputs and final (state, memory); clips (cell, proj)."""
    outputs, (state, memory) = packed_clipped_lstm(
        inputs, packed_weights(lstms), lengths, *clips, initial
    )
    loss = (outputs * torch.linspace(-1, 1, outputs.size(-1))).sum() + (state**2).sum()
    parameters = [inputs, *(p for lstm in lstms for p in lstm.parameters())]
    with torch.no_grad():
        inference = packed_clipped_lstm(inputs, packed_weights(lstms), lengths, *clips, initial)
    return [
        outputs,
        state,
        memory,
        *torch.autograd.grad(loss, parameters),
        inference[0],
        *inference[1],
    ]


def test_packed_lstm_time_loops_run_as_python_where_torchscript_cannot_compile_them(
    monkeypatch, caplog
):
    """Where torch.jit.script fails (TorchScript is deprecated), the loop runs as Python, with a
    warning naming it."""

    def no_torchscript(function):
        raise RuntimeError("TorchScript is gone")

    monkeypatch.setattr(torch.jit, "script", no_torchscript)
    with caplog.at_level("WARNING"):
        loop = packed_module.scripted.__wrapped__(packed_module.forward_steps)
    assert loop is packed_module.forward_steps
    assert "cannot compile forward_steps (TorchScript is gone)" in caplog.text
