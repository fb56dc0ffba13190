from collections.abc import Callable
from functools import partial

import pytest
import torch
from allennlp.common import Params
from allennlp.modules.elmo import batch_to_ids
from allennlp.modules.token_embedders import TokenEmbedder

from benchmarks.support.op_audit import OpAudit
from elmo_plugin.modules.bilm_encoder import BiLmEncoder, current_architecture
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.modules.elmo_char_cnn import ACTIVATIONS, PADDING_CHAR_ID, ElmoCharCnn
from tests.helpers import TINY_LSTM_OVERRIDES, tiny_model_and_batches


def make_cnn(**kwargs) -> ElmoCharCnn:
    torch.manual_seed(0)
    return ElmoCharCnn(filters=[(1, 4), (2, 6), (3, 8)], num_highway=2, projection_dim=5, **kwargs)


def reference_cnn(cnn: ElmoCharCnn, char_ids: torch.Tensor) -> torch.Tensor:
    """The straightforward computation: every token, every convolution over all 50 positions."""
    flat = char_ids.reshape(-1, char_ids.size(-1))
    embedded = cnn.char_embedding(flat).transpose(1, 2)
    pooled = [
        ACTIVATIONS[cnn.activation](conv(embedded).max(dim=-1).values) for conv in cnn.convolutions
    ]
    vectors = cnn.projection(cnn.highways(torch.cat(pooled, dim=-1))) * (flat > 0).any(
        dim=-1, keepdim=True
    )
    return vectors.view(*char_ids.shape[:-1], -1)


def awkward_tokens() -> torch.Tensor:
    """(3, 44, 50): words of every length 1..60 (longer ones cut to 50 characters), repeated
    words, padding tokens, and random ids with the padding character inside, made of padding
    characters only, or with id 0 inside, in shuffled order."""
    words = [
        "".join(chr(97 + (i * 7 + k) % 26) for k in range(length))
        for i, length in enumerate(range(1, 61))
    ]
    ids = batch_to_ids([words, ["a", "bb", words[3], "ab"]]).view(-1, 50)
    generator = torch.Generator().manual_seed(2)
    odd = torch.randint(1, 262, (6, 50), generator=generator)
    odd[0, 10:20] = PADDING_CHAR_ID
    odd[1, 3:] = PADDING_CHAR_ID
    odd[2] = PADDING_CHAR_ID
    odd[3, 5] = 0
    ids = torch.cat([ids, odd, odd[:2], torch.zeros(4, 50, dtype=torch.long)])
    return ids[torch.randperm(len(ids), generator=generator)].view(3, 44, 50)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_equals_the_full_computation_in_values_and_gradients(activation):
    """Prefix-only convolutions, the shared all-padding window, length groups and de-duplication
    change nothing: same vectors and same gradients as convolving all 50 positions of every
    token (filter widths 1..7: some tokens have an all-padding window, the longest do not)."""
    torch.manual_seed(0)
    filters = [[1, 4], [2, 6], [3, 8], [7, 5]]
    cnn = ElmoCharCnn(filters=filters, num_highway=2, projection_dim=5, activation=activation)
    ids = awkward_tokens()
    actual, expected = cnn(ids), reference_cnn(cnn, ids)
    assert actual.shape == (3, 44, 5)
    assert torch.allclose(actual, expected, atol=1e-6)
    padding = ~(ids > 0).any(dim=-1)
    assert padding.sum() >= 4 and torch.all(actual[padding] == 0)
    weights = torch.randn_like(actual)
    actual_grads = torch.autograd.grad((actual * weights).sum(), list(cnn.parameters()))
    expected_grads = torch.autograd.grad((expected * weights).sum(), list(cnn.parameters()))
    for (name, _), got, want in zip(
        cnn.named_parameters(), actual_grads, expected_grads, strict=False
    ):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), name
    assert (
        float(actual_grads[0][PADDING_CHAR_ID].abs().sum()) > 0
    )  # the all-padding window is learned


def test_all_padding_and_empty_batches_give_zeros():
    cnn = make_cnn()
    assert torch.equal(cnn(torch.zeros(2, 3, 50, dtype=torch.long)), torch.zeros(2, 3, 5))
    assert cnn(torch.zeros(0, 3, 50, dtype=torch.long)).shape == (0, 3, 5)


def test_gradients_reach_every_parameter_through_deduplication():
    cnn = make_cnn(activation="tanh")
    ids = torch.randint(1, 262, (2, 3, 50))
    cnn(ids).sum().backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0
        for name, p in cnn.named_parameters()
        if "char_embedding" not in name
    )
    assert cnn.char_embedding.weight.grad[0].abs().sum() == 0  # padding id stays zero


def test_registered_and_built_from_params():
    cnn = TokenEmbedder.from_params(
        Params(
            {
                "type": "elmo_char_cnn",
                "filters": [[1, 4], [2, 4]],
                "num_highway": 1,
                "projection_dim": 3,
            }
        )
    )
    assert isinstance(cnn, ElmoCharCnn) and cnn.get_output_dim() == 3
    assert cnn.highways._layers[0].weight.shape == (16, 8)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_initialized_as_bilm_tf(activation):
    cnn = ElmoCharCnn(
        filters=[[1, 64], [7, 256]], num_highway=2, projection_dim=64, activation=activation
    )
    characters = cnn.char_embedding.weight
    assert characters[0].abs().max() == 0 and 0.9 < characters.abs().max() <= 1.0
    for (width, _), convolution in zip(cnn.filters, cnn.convolutions, strict=False):
        if activation == "relu":
            assert convolution.weight.abs().max() <= 0.05 and convolution.weight.abs().max() > 0.04
        else:
            assert convolution.weight.std().item() == pytest.approx(
                (1 / (width * 16)) ** 0.5, rel=0.1
            )
        assert convolution.bias.abs().max() == 0
    for layer in [*cnn.highways._layers, cnn.projection]:
        assert layer.weight.std().item() == pytest.approx((1 / 320) ** 0.5, rel=0.05)
    for layer in cnn.highways._layers:
        assert (
            layer.bias[:320].abs().max() == 0 and (layer.bias[320:] == 2.0).all()
        )  # gates carry the input
    assert cnn.projection.bias.abs().max() == 0


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_inference_fast_path_equals_allennlps_highway_and_the_full_computation(activation):
    """Without a gradient to compute, the convolutions (every width in one matmul over character
    windows, the windows past a 50-character token's end masked), the highway and the projection
    run through oneDNN: the same vectors as allennlp's `Highway` and `Linear` and as torch's
    convolutions over all 50 positions (the path that training takes), for tokens of every
    length, with and without an all-padding window, and a batch of one."""
    torch.manual_seed(0)
    cnn = ElmoCharCnn(
        filters=[[1, 4], [2, 6], [3, 8], [7, 5]],
        num_highway=2,
        projection_dim=5,
        activation=activation,
    )
    ids = awkward_tokens()
    with torch.no_grad():
        fast, one = cnn(ids), cnn(ids[:1, :1])
        pooled = torch.randn(9, cnn.projection.in_features)
        assert torch.allclose(
            cnn.highway_projection(pooled), cnn.projection(cnn.highways(pooled)), atol=1e-6
        )
    assert torch.allclose(fast, reference_cnn(cnn, ids), atol=1e-6)
    assert torch.allclose(one, reference_cnn(cnn, ids[:1, :1]), atol=1e-6)


# The original ELMo's filter widths (options.json), at a quarter of its counts: the counts change
# no code path, only the time a test takes.
ORIGINAL_WIDTHS = [[1, 8], [2, 8], [3, 16], [4, 32], [5, 64], [6, 128], [7, 256]]


def values_and_gradients(
    cnn: ElmoCharCnn, path: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor
) -> list[torch.Tensor]:
    """`path(ids)` and every parameter's gradient of a weighted sum of it (fixed weights; zero
    where a parameter has no part in it)."""
    vectors = path(ids)
    weights = torch.linspace(-1, 1, vectors.numel(), dtype=vectors.dtype).view(vectors.shape)
    loss = (vectors * weights).sum()
    return [vectors, *torch.autograd.grad(loss, list(cnn.parameters()), materialize_grads=True)]


@pytest.mark.parametrize("filters", [[[1, 4], [2, 6], [3, 8], [7, 5]], ORIGINAL_WIDTHS])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize(
    "dtype, tolerance", [(torch.float32, {"atol": 1e-5, "rtol": 1e-4}), (torch.float64, {})]
)
def test_reference_equals_the_cpu_fast_path_in_values_and_every_gradient(
    filters, activation, dtype, tolerance
):
    """The fixed-shape reference (every token, every position, one matmul over all widths) and
    the CPU fast path (distinct tokens, length groups, prefixes only) give the same vectors and
    the same gradient for every parameter: padding tokens, repeated tokens, tokens of every
    length (those of 48 bytes or more fill all 50 characters: no all-padding window), and a
    batch of one token; without a gradient too (the fast path's oneDNN matmul).

    Ties: amax splits a gradient evenly between windows of equal value. In the reference every
    window starting at or after a token's length L holds only padding characters, so several
    tie at that value; the fast path has one such window per filter (and, within a length group,
    the shorter tokens' windows between L and the group's longest), and torch.maximum gives half
    to each side of a tie. However the split falls, those windows have one and the same input,
    so the weights, the bias and the padding character's embedding receive the whole gradient
    times that input: the same parameter gradients."""
    torch.manual_seed(0)
    cnn = ElmoCharCnn(filters=filters, num_highway=2, projection_dim=5, activation=activation)
    cnn = cnn.to(dtype)
    ids = awkward_tokens()
    assert (ids[..., -1] > 0).sum() - (ids[..., -1] == PADDING_CHAR_ID).sum() >= 12
    for batch in (ids, batch_to_ids([["lobster"]])):
        reference = values_and_gradients(cnn, cnn.reference, batch)
        fast = values_and_gradients(cnn, cnn.cpu_fast_path, batch)
        assert reference[0].dtype == dtype
        for (name, _), got, want in zip(
            [("vectors", None), *cnn.named_parameters()], reference, fast, strict=True
        ):
            torch.testing.assert_close(got, want, **tolerance, msg=name)
    padding = ~(ids > 0).any(dim=-1)
    assert padding.sum() >= 4 and torch.all(cnn.reference(ids)[padding] == 0)
    with torch.no_grad():
        torch.testing.assert_close(cnn.reference(ids), cnn.cpu_fast_path(ids), **tolerance)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_reference_under_bf16_autocast_is_close_to_float32(activation):
    """Under `torch.autocast` with bfloat16 (`mixed_precision: "bf16"`) the reference's matmuls
    run in bfloat16 (8 significant bits, ~0.4% per rounding, several roundings deep): its
    vectors are within 3% of the largest float32 value. Its gradients (float32, as the
    parameters) are rougher, within 35% (relative L2) of float32's, as are the CPU fast path's
    under autocast: the loss's weights of both signs cancel, and rounding makes windows that
    nearly tie in float32 tie exactly, so that amax splits their gradient."""
    torch.manual_seed(0)
    cnn = ElmoCharCnn(
        filters=ORIGINAL_WIDTHS, num_highway=2, projection_dim=5, activation=activation
    )
    ids = awkward_tokens()
    float32 = values_and_gradients(cnn, cnn.reference, ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = values_and_gradients(cnn, cnn.reference, ids)
    assert bf16[0].dtype == torch.bfloat16
    assert (bf16[0].float() - float32[0]).abs().max() <= 0.03 * float32[0].abs().max()
    for (name, _), got, want in zip(cnn.named_parameters(), bf16[1:], float32[1:], strict=True):
        assert got.dtype == torch.float32
        assert (got - want).norm() <= 0.35 * want.norm(), name


def forward_and_backward_ops(cnn: ElmoCharCnn, batches: list[torch.Tensor]) -> OpAudit:
    """`cnn(batch)` and every parameter's gradient of its sum, recorded as phases "forward i"
    and "backward i" for the i-th batch."""

    def gradients(vectors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(vectors.sum(), list(cnn.parameters()))

    with OpAudit() as audit:
        for index, batch in enumerate(batches):
            vectors = audit.run(f"forward {index}", partial(cnn, batch))
            audit.run(f"backward {index}", partial(gradients, vectors))
    return audit


def test_reference_dispatches_no_syncing_op_and_the_same_ops_for_every_batch_of_one_shape():
    """Where the CPU runs the GPU's paths (`gpu_path_on_cpu`: `reference`), forward and
    backward dispatch no op that makes a GPU wait for the host (`.item()`, unique, nonzero,
    a tensor from a Python list, ...), no convolution (no cuDNN plan per shape), and the same
    ops on the same shapes for two different batches of one shape. The CPU fast path, audited
    the same way, has syncs (unique, equal, int(...), tolist): the audit sees them."""
    torch.manual_seed(0)
    filters = [[1, 4], [2, 6], [3, 8], [7, 5]]
    cnn = ElmoCharCnn(filters=filters, num_highway=2, projection_dim=5)
    ids = awkward_tokens()
    other = torch.randint(1, 262, ids.shape, generator=torch.Generator().manual_seed(1))
    other[0, :5] = 0  # padding tokens elsewhere
    with gpu_path_on_cpu():
        audit = forward_and_backward_ops(cnn, [ids, other])
    assert audit.syncs() == []
    assert not any("convolution" in op for op, _ in audit.trace())
    assert audit.trace("forward 0", "backward 0") == audit.trace("forward 1", "backward 1")
    fast = forward_and_backward_ops(cnn, [ids])
    assert {"_unique2", "equal", "_local_scalar_dense", "tolist"} <= {
        op.sync for op in fast.syncs()
    }


def test_an_architecture_recorded_with_cpu_path_builds_the_same_encoder_without_it():
    """Older versions recorded `cpu_path` (it chose the GPU's computation on a CPU) in the
    architecture: it is dropped on reading, the old `char_cnn` form and the current one alike,
    and the encoder built from it has the same architecture and state."""
    params = {"filters": [[1, 4]], "num_highway": 1, "projection_dim": 3}
    contextualizer = {"type": "elmo_lstm", "input_dim": 3, "cell_size": 4}
    current = {
        "token_embedder": {"type": "elmo_char_cnn", **params},
        "contextualizer": contextualizer,
    }
    built = BiLmEncoder.from_architecture(current)
    for token_embedder in (
        {"token_embedder": {"type": "elmo_char_cnn", **params, "cpu_path": "reference"}},
        {"char_cnn": {**params, "cpu_path": "fast"}},
    ):
        old = {**token_embedder, "contextualizer": contextualizer}
        assert current_architecture(old) == current
        rebuilt = BiLmEncoder.from_architecture(old)
        assert rebuilt.characters.architecture == built.characters.architecture
        assert set(rebuilt.state_dict()) == set(built.state_dict())


@pytest.mark.parametrize("mixed_precision", [None, "bf16"])
def test_a_bilm_with_the_reference_char_cnn_trains(tiny_corpus, monkeypatch, mixed_precision):
    """An `elmo_bilm` where the CPU runs the GPU's paths (`gpu_path_on_cpu`) runs the reference
    (never the CPU fast path) and its loss goes down over a few steps on one tiny batch, in
    float32 and under bf16 autocast."""

    def no_fast_path(self, elmo_tokens):
        raise AssertionError("the CPU fast path ran")

    monkeypatch.setattr(ElmoCharCnn, "cpu_fast_path", no_fast_path)
    overrides = {**TINY_LSTM_OVERRIDES, "model.mixed_precision": mixed_precision}
    valid = tiny_corpus / "valid.txt"
    model, (tensors,) = tiny_model_and_batches("elmo_lstm.jsonnet", overrides, valid, [8], False)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    with gpu_path_on_cpu():
        for _ in range(10):
            optimizer.zero_grad()
            loss = model(**tensors)["loss"]
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False))
    assert losses[-1] < 0.95 * losses[0]
