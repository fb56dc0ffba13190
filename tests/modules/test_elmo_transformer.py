"""elmo_transformer: no peeking in either direction, padding invariance, shapes, dropout."""

from typing import Any

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder

from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.elmo_transformer import (
    ElmoTransformerContextualizer,
    fast_dropout,
    sinusoidal_positions,
)

DIM = 16
LENGTHS = [9, 6, 3]
TOLERANCE = 1e-5


def make_transformer(**kwargs) -> ElmoTransformerContextualizer:
    torch.manual_seed(1)
    defaults = dict(
        input_dim=DIM,
        feedforward_hidden_dim=32,
        num_layers=3,
        num_attention_heads=4,
        dropout=0.1,
        input_dropout=0.1,
    )
    return ElmoTransformerContextualizer(**{**defaults, **kwargs}).eval()


def padded_batch(lengths=LENGTHS) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs (batch, max length, DIM) and the prefix mask of `lengths`."""
    torch.manual_seed(2)
    timesteps = max(lengths)
    mask = torch.arange(timesteps).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return torch.randn(len(lengths), timesteps, DIM), mask


def perturbed(inputs: torch.Tensor, position: int) -> torch.Tensor:
    """A copy of inputs with every sentence's vector at `position` replaced by noise."""
    changed = inputs.clone()
    changed[:, position] = torch.randn(inputs.size(0), inputs.size(-1)) * 3
    return changed


def test_rejects_bad_arguments():
    with pytest.raises(ConfigurationError, match="num_attention_heads"):
        ElmoTransformerContextualizer(
            input_dim=10, feedforward_hidden_dim=8, num_layers=1, num_attention_heads=4
        )
    with pytest.raises(ConfigurationError, match="backward_positions"):
        ElmoTransformerContextualizer(
            input_dim=8,
            feedforward_hidden_dim=8,
            num_layers=1,
            num_attention_heads=4,
            backward_positions="middle",
        )


def test_registered_and_built_from_params():
    encoder = Seq2SeqEncoder.from_params(
        Params(
            {
                "type": "elmo_transformer",
                "input_dim": 8,
                "hidden_dim": 16,
                "num_layers": 2,
                "num_attention_heads": 2,
            }
        )
    )
    assert isinstance(encoder, ElmoTransformerContextualizer)
    assert encoder.num_layers == 2 and encoder.is_bidirectional()
    assert (encoder.get_input_dim(), encoder.get_output_dim()) == (8, 16)


def test_top_and_all_layer_shapes_and_zero_padding():
    transformer = make_transformer()
    inputs, mask = padded_batch()
    top = transformer(inputs, mask)
    layers = transformer.all_layers(inputs, mask)
    assert top.shape == (3, 9, 2 * DIM)
    assert len(layers) == 3 and all(layer.shape == (3, 9, 2 * DIM) for layer in layers)
    torch.testing.assert_close(layers[-1], top)
    for layer in layers:
        assert layer[~mask].abs().max() == 0
        assert layer[mask].abs().min(dim=-1).values.gt(0).all()  # real positions are not zeroed


def test_return_all_layers():
    inputs, mask = padded_batch()
    every = make_transformer(return_all_layers=True)(inputs, mask)
    assert isinstance(every, list) and len(every) == 3
    expected = make_transformer().all_layers(inputs, mask)
    for layer, reference in zip(every, expected, strict=False):
        torch.testing.assert_close(layer, reference)


@pytest.mark.parametrize("backward_positions", ["from_end", "from_start"])
@pytest.mark.parametrize("position", range(8))
def test_forward_direction_never_sees_the_future(position, backward_positions):
    transformer = make_transformer(backward_positions=backward_positions)
    inputs, mask = padded_batch()
    before = transformer.all_layers(inputs, mask)
    after = transformer.all_layers(perturbed(inputs, position + 1), mask)
    for layer_before, layer_after in zip(before, after, strict=False):
        forward_before, forward_after = layer_before[..., :DIM], layer_after[..., :DIM]
        torch.testing.assert_close(
            forward_after[:, : position + 1],
            forward_before[:, : position + 1],
            atol=TOLERANCE,
            rtol=0,
        )
    # ...while the perturbed token itself does reach the forward state of its own sentence
    changed = (after[-1][0, position + 1, :DIM] - before[-1][0, position + 1, :DIM]).abs().max()
    assert changed > 1e-3


@pytest.mark.parametrize("backward_positions", ["from_end", "from_start"])
@pytest.mark.parametrize("position", range(1, 9))
def test_backward_direction_never_sees_the_past(position, backward_positions):
    transformer = make_transformer(backward_positions=backward_positions)
    inputs, mask = padded_batch()
    before = transformer.all_layers(inputs, mask)
    after = transformer.all_layers(perturbed(inputs, position - 1), mask)
    for layer_before, layer_after in zip(before, after, strict=False):
        backward_before, backward_after = layer_before[..., DIM:], layer_after[..., DIM:]
        torch.testing.assert_close(
            backward_after[:, position:], backward_before[:, position:], atol=TOLERANCE, rtol=0
        )
    changed = (after[-1][0, position - 1, DIM:] - before[-1][0, position - 1, DIM:]).abs().max()
    assert changed > 1e-3


def test_gradients_flow_only_from_allowed_positions_in_training_mode():
    """Jacobian structure with dropout on: d forward[t] / d input[s] = 0 for s > t and
    d backward[t] / d input[s] = 0 for s < t, in every sentence of a padded batch."""
    transformer = make_transformer().train()
    inputs, mask = padded_batch()
    inputs.requires_grad_(True)
    probe = torch.randn(DIM)  # not .sum(): a layer-normed vector sums to a constant
    for sentence, length in enumerate(LENGTHS):
        for position in range(length):
            torch.manual_seed(3)
            output = transformer(inputs, mask)
            (forward_grad,) = torch.autograd.grad(output[sentence, position, :DIM] @ probe, inputs)
            torch.manual_seed(3)
            output = transformer(inputs, mask)
            (backward_grad,) = torch.autograd.grad(output[sentence, position, DIM:] @ probe, inputs)
            assert forward_grad[sentence, position + 1 :].abs().sum() == 0
            assert backward_grad[sentence, :position].abs().sum() == 0
            others = [index for index in range(len(LENGTHS)) if index != sentence]
            assert forward_grad[others].abs().max() == 0 and backward_grad[others].abs().max() == 0
            assert (
                forward_grad[sentence, position].abs().max() > 0
                and backward_grad[sentence, position].abs().max() > 0
            )


@pytest.mark.parametrize("backward_positions", ["from_end", "from_start"])
def test_padding_never_changes_real_outputs(backward_positions):
    transformer = make_transformer(backward_positions=backward_positions)
    inputs, mask = padded_batch()
    batched = transformer.all_layers(inputs, mask)
    for sentence, length in enumerate(LENGTHS):
        alone = transformer.all_layers(
            inputs[sentence : sentence + 1, :length], mask[sentence : sentence + 1, :length]
        )
        for layer_alone, layer_batched in zip(alone, batched, strict=False):
            torch.testing.assert_close(
                layer_alone[0], layer_batched[sentence, :length], atol=TOLERANCE, rtol=0
            )
    # whatever sits in the padding positions
    garbage = inputs.clone()
    garbage[~mask] = 1e3
    for layer_garbage, layer_batched in zip(
        transformer.all_layers(garbage, mask), batched, strict=False
    ):
        torch.testing.assert_close(layer_garbage, layer_batched, atol=TOLERANCE, rtol=0)


def test_each_direction_is_a_language_model_of_its_own_context():
    """Forward states ignore what follows (appending tokens changes nothing before them) and,
    with positions counted from the sentence end, backward states ignore what precedes
    (prepending tokens changes nothing after them): neither even learns the length of the
    context it must not see. Counted from the start (the default), backward states see it."""
    torch.manual_seed(5)
    sentence, extra = torch.randn(1, 5, DIM), torch.randn(1, 3, DIM)
    full = torch.ones(1, 8, dtype=torch.bool)
    alone = make_transformer(backward_positions="from_end").all_layers(sentence, full[:, :5])
    appended = make_transformer(backward_positions="from_end").all_layers(
        torch.cat([sentence, extra], dim=1), full
    )
    prepended = make_transformer(backward_positions="from_end").all_layers(
        torch.cat([extra, sentence], dim=1), full
    )
    for layer_alone, layer_appended, layer_prepended in zip(
        alone, appended, prepended, strict=False
    ):
        torch.testing.assert_close(
            layer_appended[:, :5, :DIM], layer_alone[..., :DIM], atol=TOLERANCE, rtol=0
        )
        torch.testing.assert_close(
            layer_prepended[:, 3:, DIM:], layer_alone[..., DIM:], atol=TOLERANCE, rtol=0
        )
    from_start = make_transformer()
    assert from_start.backward_positions == "from_start"
    moved = (
        from_start(torch.cat([extra, sentence], dim=1), full)[:, 3:, DIM:]
        - from_start(sentence, full[:, :5])[..., DIM:]
    )
    assert moved.abs().max() > 1e-3


def test_inputs_are_layer_normed_unless_switched_off():
    """With `input_layer_norm` (default) the stacks see the inputs layer-normed, as allennlp-models'
    character encoder hands them over: scaling a token's vector changes nothing."""
    inputs, mask = padded_batch()
    scales = torch.rand(*inputs.shape[:2], 1) * 5 + 0.5
    normed = make_transformer()
    torch.testing.assert_close(
        normed(inputs * scales, mask), normed(inputs, mask), atol=1e-4, rtol=0
    )
    raw = make_transformer(input_layer_norm=False)
    assert raw.input_norm is None
    assert (raw(inputs * scales, mask) - raw(inputs, mask)).abs().max() > 1e-2


def test_directions_have_separate_parameters():
    """Zeroing the backward stack's feed-forward output leaves the forward half untouched."""
    transformer = make_transformer()
    inputs, mask = padded_batch()
    before = transformer(inputs, mask)
    with torch.no_grad():
        for layer in transformer.layers:
            layer.feedforward_out_weight[1].zero_()
    after = transformer(inputs, mask)
    torch.testing.assert_close(after[..., :DIM], before[..., :DIM])
    assert (after[..., DIM:] - before[..., DIM:])[mask].abs().max() > 1e-3


def test_long_sequences_extend_the_position_table():
    transformer = make_transformer(num_layers=1)
    inputs = torch.randn(1, 600, DIM)
    output = transformer(inputs, torch.ones(1, 600, dtype=torch.bool))
    assert output.shape == (1, 600, 2 * DIM) and torch.isfinite(output).all()
    torch.testing.assert_close(transformer.positions(600), sinusoidal_positions(600, DIM))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_cpu_dropout_is_inverted_bernoulli_dropout(p):
    inputs = torch.ones(1000, 1001, requires_grad=True)
    torch.manual_seed(4)
    dropped = fast_dropout(inputs, p, training=True)
    kept = dropped != 0
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.003)
    torch.testing.assert_close(
        dropped[kept], torch.full_like(dropped[kept], 1 / (1 - p)), rtol=1e-4, atol=0
    )
    assert dropped.mean().item() == pytest.approx(1.0, abs=0.005)
    dropped.sum().backward()
    torch.testing.assert_close(inputs.grad, dropped.detach())  # gradient = mask * scale
    assert kept[:, :-1].float().mean(dim=0).std() < 0.05  # no column pattern in the 4-per-word draw
    torch.manual_seed(4)
    torch.testing.assert_close(
        fast_dropout(inputs, p, training=True), dropped
    )  # reproducible from the seed
    assert (
        fast_dropout(inputs, p, training=False) is inputs
        and fast_dropout(inputs, 0.0, training=True) is inputs
    )


def test_bilm_encoder_uses_it_unchanged():
    """Layer 0 = the character CNN output twice, layers 1.. = the transformer's own layers on it."""
    char_cnn = ElmoCharCnn(filters=[[1, 4], [2, 4]], num_highway=1, projection_dim=DIM)
    transformer = make_transformer(num_layers=2)
    encoder = BiLmEncoder(char_cnn, transformer).eval()
    char_ids = torch.randint(1, 262, (2, 5, 50))
    char_ids[1, 3:] = 0
    with torch.no_grad():
        layers, mask = encoder(char_ids)
        tokens = char_cnn(char_ids)
        expected = [torch.cat([tokens, tokens], dim=-1), *transformer.all_layers(tokens, mask)]
    assert mask.tolist() == [[True] * 5, [True] * 3 + [False] * 2]
    assert encoder.num_layers == len(layers) == 3
    for got, want in zip(layers, expected, strict=False):
        assert torch.equal(got, want)


# ----- configs and the real allennlp CLI -------------------------------------------------


def test_hidden_dim_is_still_accepted_as_the_old_name_of_feedforward_hidden_dim():
    params = {"type": "elmo_transformer", "input_dim": DIM, "num_attention_heads": 4}
    old = Seq2SeqEncoder.from_params(Params({**params, "hidden_dim": 24}))
    assert isinstance(old, ElmoTransformerContextualizer)
    assert old.feedforward_hidden_dim == 24 and old.layers[0].feedforward_in_weight.shape == (
        2,
        DIM,
        24,
    )
    both = {**params, "hidden_dim": 24, "feedforward_hidden_dim": 24}
    with pytest.raises(ConfigurationError, match="elmo_transformer: give .* exactly once"):
        Seq2SeqEncoder.from_params(Params(both))
    assert "feedforward_hidden_dim=32" in repr(
        make_transformer()
    )  # DirectionalBlock prints its sizes


def copy_into_allennlp_models(ours: Any, theirs) -> None:
    """Our stacked per-direction parameters -> allennlp-models' two `make_model` transformers
    (their Linear weights are (out, in), ours (in, out) for x @ W)."""
    with torch.no_grad():
        for direction, stack in enumerate(
            [theirs._forward_transformer, theirs._backward_transformer]
        ):
            for block, layer in zip(ours.layers, stack.layers, strict=False):
                attention_norm, feedforward_norm = layer.sublayer[0].norm, layer.sublayer[1].norm
                attention_norm.gamma.copy_(block.attention_norm_weight[direction, 0])
                attention_norm.beta.copy_(block.attention_norm_bias[direction, 0])
                for linear, weight, bias in zip(
                    layer.self_attn.linears[:3],
                    block.qkv_weight[direction].chunk(3, dim=-1),
                    block.qkv_bias[direction, 0].chunk(3, dim=-1),
                    strict=False,
                ):
                    linear.weight.copy_(weight.t())
                    linear.bias.copy_(bias)
                layer.self_attn.linears[3].weight.copy_(block.output_weight[direction].t())
                layer.self_attn.linears[3].bias.copy_(block.output_bias[direction, 0])
                feedforward_norm.gamma.copy_(block.feedforward_norm_weight[direction, 0])
                feedforward_norm.beta.copy_(block.feedforward_norm_bias[direction, 0])
                layer.feed_forward.w_1.weight.copy_(block.feedforward_in_weight[direction].t())
                layer.feed_forward.w_1.bias.copy_(block.feedforward_in_bias[direction, 0])
                layer.feed_forward.w_2.weight.copy_(block.feedforward_out_weight[direction].t())
                layer.feed_forward.w_2.bias.copy_(block.feedforward_out_bias[direction, 0])
            stack.norm.gamma.copy_(ours.final_norm_weight[direction, 0])
            stack.norm.beta.copy_(ours.final_norm_bias[direction, 0])


def test_equals_allennlp_models_transformer_in_values_and_gradients():
    """The same weights in allennlp-models' `BidirectionalLanguageModelTransformer` (8 heads, as
    it hard-codes; positions from the start; no input layer norm; no dropout) give every layer's
    outputs and the input gradients at real positions to 1e-5 (their LayerNorm adds its epsilon to
    the standard deviation, ours inside the square root)."""
    from allennlp_models.lm.modules.seq2seq_encoders.bidirectional_lm_transformer import (
        BidirectionalLanguageModelTransformer,
    )

    ours = make_transformer(
        num_attention_heads=8,
        dropout=0.0,
        input_dropout=0.0,
        input_layer_norm=False,
        backward_positions="from_start",
        return_all_layers=True,
    )
    with torch.no_grad():  # non-trivial norms and biases, so a misplaced one shows
        for name, parameter in ours.named_parameters():
            if "norm" in name or "bias" in name:
                parameter.add_(torch.randn_like(parameter) * 0.3)
    theirs = BidirectionalLanguageModelTransformer(
        DIM, 32, 3, dropout=0.0, return_all_layers=True
    ).eval()
    copy_into_allennlp_models(ours, theirs)
    inputs, mask = padded_batch()
    real = mask.unsqueeze(-1)
    results = []
    for module in (ours, theirs):
        leaf = inputs.clone().requires_grad_()
        layers = module(leaf, mask)
        weights = torch.Generator().manual_seed(3)
        loss = sum(
            (layer * real * torch.randn(layer.shape, generator=weights)).sum() for layer in layers
        )
        results.append(([layer * real for layer in layers], torch.autograd.grad(loss, leaf)[0]))
    (our_layers, our_grad), (their_layers, their_grad) = results
    assert len(our_layers) == len(their_layers) == 3
    for got, want in zip(our_layers, their_layers, strict=False):
        torch.testing.assert_close(got, want, rtol=TOLERANCE, atol=TOLERANCE)
    torch.testing.assert_close(our_grad, their_grad, rtol=TOLERANCE, atol=TOLERANCE)


def test_attention_dropout_drops_attention_weights_in_training_only():
    """With all other dropouts 0, `attention_dropout` changes training outputs (differently per
    draw) and leaves eval outputs alone."""
    inputs, mask = padded_batch()
    plain = make_transformer(dropout=0.0, input_dropout=0.0)
    with_attention_dropout = make_transformer(dropout=0.0, input_dropout=0.0, attention_dropout=0.5)
    with torch.no_grad():
        assert torch.equal(with_attention_dropout(inputs, mask), plain(inputs, mask))
        with_attention_dropout.train()
        first, second = with_attention_dropout(inputs, mask), with_attention_dropout(inputs, mask)
        assert torch.equal(plain.train()(inputs, mask), plain(inputs, mask))  # nothing else random
    assert not torch.allclose(first, second) and not torch.allclose(first, plain(inputs, mask))
