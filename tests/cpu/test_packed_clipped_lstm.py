"""The CPU fast path (`packed_clipped_lstm`: packed sequences, C++ time loops forward and
backward, oneDNN matmuls) against the reference loop (`modules/clipped_lstm.py`)."""

import pytest
import torch

from elmo_plugin.cpu import distinct_rows as distinct_rows_module
from elmo_plugin.cpu import packed_clipped_lstm as packed_module
from elmo_plugin.cpu import side_by_side as side_by_side_module
from elmo_plugin.cpu.lstm_tensors import Clips, LstmState, stacked_weights
from elmo_plugin.cpu.packed_clipped_lstm import packed_clipped_lstm, runs_fast
from elmo_plugin.cpu.side_by_side import side_by_side
from elmo_plugin.modules.clipped_lstm import clipped_lstm

DIM = 6
CLIPS = [Clips(0.5, 0.3), Clips(None, None), Clips(0.5, None), Clips(None, 0.3)]
# padding, a batch of one, length-1 rows, no padding
LENGTHS = [[7, 5, 3, 3, 0], [1], [4, 1], [6, 6, 6]]


def directions_lstms(cells: int = 10) -> list[torch.nn.LSTM]:
    torch.manual_seed(0)
    lstms = [torch.nn.LSTM(DIM, cells, proj_size=DIM, batch_first=True) for _ in range(2)]
    for parameter in (p for lstm in lstms for p in lstm.parameters()):
        torch.nn.init.normal_(parameter, std=0.5)  # large enough that clipping binds
    return lstms


def a_batch(lengths: list[int], cells: int, with_initial: bool, repeated: bool = False):
    """(lengths, inputs (2, batch, timesteps, DIM), an initial state or None); `repeated`: the
    inputs take two vectors in turn (inference then computes gates once per distinct vector)."""
    torch.manual_seed(1)
    lengths_tensor = torch.tensor(lengths)
    shape = (2, len(lengths), max(max(lengths), 1))
    which = torch.arange(shape[0] * shape[1] * shape[2]).view(shape) % 2
    inputs = torch.randn(2, DIM)[which] if repeated else torch.randn(*shape, DIM)
    initial = (
        LstmState(torch.randn(2, len(lengths), DIM), torch.randn(2, len(lengths), cells))
        if with_initial
        else None
    )
    return lengths_tensor, inputs, initial


def trained(lstm_function, lstms, lengths, inputs, initial, clips) -> list[torch.Tensor]:
    """outputs, final (state, memory), then the gradients of a loss on the outputs and the
    final state and memory w.r.t. the inputs, every parameter of every LSTM and the initial
    state and memory where given."""
    leaf = inputs.clone().requires_grad_()
    initial = None if initial is None else LstmState(*(p.clone().requires_grad_() for p in initial))
    outputs, final = lstm_function(leaf, stacked_weights(lstms), lengths, clips, initial)
    loss = (outputs * torch.linspace(-1, 1, outputs.size(-1))).sum() + (final.state**2).sum()
    loss = loss + (final.memory * torch.linspace(-1, 1, final.memory.size(-1))).sum()
    wrt = [leaf, *(p for lstm in lstms for p in lstm.parameters()), *(initial or ())]
    return [outputs, *final, *torch.autograd.grad(loss, wrt)]


def inferred(lstm_function, lstms, lengths, inputs, initial, clips, grad_mode=torch.no_grad):
    with grad_mode():
        outputs, final = lstm_function(inputs, stacked_weights(lstms), lengths, clips, initial)
    return [outputs, *final]


def assert_all_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    """Equal within float32 rounding (sums in another order): values and gradients."""
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.shape == b.shape, index
        assert torch.allclose(a, b, atol=2e-5, rtol=1e-4), (index, float((a - b).abs().max()))


def test_the_fast_path_runs_here():
    """A guard for CI (whose machines have a C++ compiler, ninja and a torch with oneDNN): the
    tests below compare the fast path, not the reference with itself."""
    assert runs_fast(torch.zeros(1))


@pytest.mark.parametrize("cells", [10, 37])  # below and past one vector register
@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("clips", CLIPS, ids=str)
@pytest.mark.parametrize("lengths", LENGTHS, ids=str)
def test_fast_path_training_equals_the_reference_in_values_final_states_and_every_gradient(
    lengths, clips, with_initial, cells
):
    """Outputs (zero past each length), the final (state, memory) at each row's last position
    and the gradients w.r.t. the inputs, every weight and bias of both directions and the
    initial state and memory; with
    padding, length-1 rows, a batch of one, from zero and from a given state, each clip on and
    off, cell counts below and past one vector register (the C++ loops' partial last vector)."""
    lstms = directions_lstms(cells)
    lengths, inputs, initial = a_batch(lengths, cells, with_initial)
    fast = trained(packed_clipped_lstm, lstms, lengths, inputs, initial, clips)
    assert_all_close(fast, trained(clipped_lstm, lstms, lengths, inputs, initial, clips))
    if clips.proj is not None:
        assert fast[0].abs().max() <= clips.proj


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("repeated", [False, True])
@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("clips", CLIPS, ids=str)
@pytest.mark.parametrize("lengths", [*LENGTHS, [0, 0]], ids=str)
def test_fast_path_inference_equals_the_reference_in_values_and_final_states(
    lengths, clips, with_initial, repeated, grad_mode
):
    """Inference keeps one step of intermediates and, where the inputs repeat a few vectors,
    computes x W_ih + b once per distinct vector: the reference's outputs and final states,
    also for an all-padding batch (zero outputs, the initial state back)."""
    lstms = directions_lstms(37)
    lengths, inputs, initial = a_batch(lengths, 37, with_initial, repeated)
    args = (lstms, lengths, inputs, initial, clips)
    fast = inferred(packed_clipped_lstm, *args, grad_mode=grad_mode)
    assert_all_close(fast, inferred(clipped_lstm, *args))
    if not lengths.any():
        assert not fast[0].any()


@pytest.mark.parametrize("colliding_hashes", [False, True])
@pytest.mark.parametrize("vectors", [2, None])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [4, 1], [1]], ids=str)
def test_inference_multiplies_each_distinct_input_vector_once(
    lengths, vectors, colliding_hashes, monkeypatch
):
    """x W_ih + b runs on the distinct input vectors where there are at most 3/4 as many as
    positions, else on every position, for each direction, also when every row hashes alike
    (the rows themselves are then compared); the reference's outputs and final states."""
    if colliding_hashes:
        monkeypatch.setattr(distinct_rows_module, "hash_powers", lambda width: [0] * width)
    lstms = directions_lstms()
    lengths, inputs, _ = a_batch(lengths, 10, False, repeated=vectors is not None)
    rows_multiplied: list[int] = []
    plain_linear = packed_module.linear
    monkeypatch.setattr(
        packed_module,
        "linear",
        lambda x, *rest: rows_multiplied.append(len(x)) or plain_linear(x, *rest),
    )
    args = (lstms, lengths, inputs, None, Clips(0.5, 0.3))
    fast = inferred(packed_clipped_lstm, *args)
    positions = int(lengths.sum())
    shared = vectors is not None and 4 * vectors <= 3 * positions
    assert rows_multiplied == ([vectors] if shared else [positions]) * 2
    assert_all_close(fast, inferred(clipped_lstm, *args))


def test_an_unused_final_memory_or_unused_outputs_leave_the_other_gradients_as_they_are():
    """The backward takes the gradient of the states, of the memory, or of both."""
    lstms = directions_lstms()
    lengths, inputs, initial = a_batch([4, 2, 1], 10, True)
    wrt = [inputs.requires_grad_(), *(p for lstm in lstms for p in lstm.parameters())]

    def gradients(lstm_function) -> list[torch.Tensor]:
        grads = []
        for part in (0, 1):  # only the final state; only the final memory
            _, final = lstm_function(inputs, stacked_weights(lstms), lengths, Clips(0.5), initial)
            grads += torch.autograd.grad(final[part].sum(), wrt)
        return grads

    assert_all_close(gradients(packed_clipped_lstm), gradients(clipped_lstm))


def test_gradients_reach_every_weight_contiguous_in_its_own_layout():
    """The hand-written backward hands each LSTM weight a gradient laid out like the weight, so
    accumulating it (`AccumulateGrad`) needs no strided copy."""
    lstms = directions_lstms()
    arriving = {}
    for index, lstm in enumerate(lstms):
        for name, parameter in lstm.named_parameters():
            parameter.register_hook(lambda grad, key=(index, name): arriving.setdefault(key, grad))
    lengths, inputs, _ = a_batch([4, 2, 1], 10, False)
    packed_clipped_lstm(inputs, stacked_weights(lstms), lengths, Clips(0.5, 0.3))[
        0
    ].sum().backward()
    assert len(arriving) == 2 * 5
    for (index, name), grad in arriving.items():
        assert grad.shape == getattr(lstms[index], name).shape and grad.is_contiguous(), name


def counting_side_by_side(monkeypatch) -> list[int]:
    """The list that records each side_by_side call's number of tasks."""
    calls: list[int] = []
    monkeypatch.setattr(
        side_by_side_module,
        "side_by_side",
        counting(calls, side_by_side),
    )
    return calls


@pytest.mark.parametrize("repeated", [False, True])
@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1], [0, 0]], ids=str)
def test_inference_with_each_direction_on_its_own_thread_equals_the_reference(
    lengths, with_initial, repeated, monkeypatch
):
    """With 2 torch threads, inference runs the two directions side by side on two threads:
    the reference's outputs and final states, and the 1-thread fast path's."""
    lstms = directions_lstms()
    lengths, inputs, initial = a_batch(lengths, 10, with_initial, repeated)
    args = (lstms, lengths, inputs, initial, Clips(0.5, 0.3))
    calls = counting_side_by_side(monkeypatch)
    results = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        results[threads] = inferred(packed_clipped_lstm, *args)
    assert torch.get_num_threads() == 2
    assert calls == ([2] if int(lengths.max()) > 0 else [])
    assert_all_close(results[2], results[1])
    assert_all_close(results[2], inferred(clipped_lstm, *args))


@pytest.mark.parametrize("with_initial", [False, True])
@pytest.mark.parametrize("lengths", [[7, 5, 3, 3, 0], [1], [4, 1]], ids=str)
def test_training_with_each_direction_on_its_own_thread_equals_the_reference(
    lengths, with_initial, monkeypatch
):
    """With 2 torch threads the forward and the backward run the two directions side by side:
    the reference's outputs, final states and every gradient, and the 1-thread fast path's."""
    lstms = directions_lstms()
    lengths, inputs, initial = a_batch(lengths, 10, with_initial)
    args = (lstms, lengths, inputs, initial, Clips(0.5, 0.3))
    calls = counting_side_by_side(monkeypatch)
    results = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        results[threads] = trained(packed_clipped_lstm, *args)
    assert calls == [2, 2]  # the forward and the backward, on 2 threads only
    assert_all_close(results[2], results[1])
    assert_all_close(results[2], trained(clipped_lstm, *args))


def test_directions_stay_in_one_loop_where_torchs_threads_are_not_openmps(monkeypatch):
    """torch's native thread pool has one process-wide size: there the directions take turns."""
    monkeypatch.setattr(side_by_side_module, "openmp_backend", lambda: False)
    monkeypatch.setattr(
        side_by_side_module, "side_by_side", lambda tasks: pytest.fail("ran side by side")
    )
    torch.set_num_threads(2)
    lstms = directions_lstms()
    args = (lstms, *a_batch([4, 2, 1], 10, False), Clips(0.5, 0.3))
    assert_all_close(inferred(packed_clipped_lstm, *args), inferred(clipped_lstm, *args))


def test_fast_path_takes_float32_cpu_tensors_outside_autocast_with_onednn_and_its_cpp_loops(
    monkeypatch,
):
    inputs = torch.zeros(2, 3)
    assert runs_fast(inputs)
    assert not runs_fast(inputs.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not runs_fast(inputs)
    with monkeypatch.context() as patch:
        patch.setattr(packed_module, "onednn_built", lambda: False)
        assert not runs_fast(inputs)
    monkeypatch.setattr(packed_module, "compiled_steps", lambda: None)
    assert not runs_fast(inputs)


def counting(calls: list[int], side_by_side):
    """`side_by_side`, recording each call's number of tasks in `calls`."""

    def run(tasks):
        calls.append(len(tasks))
        return side_by_side(tasks)

    return run
