import pytest
import torch
from allennlp.common import Params
from allennlp.modules.elmo import batch_to_ids
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.modules.elmo_char_cnn import ACTIVATIONS, PADDING_CHAR_ID, ElmoCharCnn


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
