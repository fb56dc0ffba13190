"""`elmo_bilm` on `elmo_streams` batches: the stateful model carries each row's state from one
batch to the next (detached), resets it where a stream starts, keeps training and evaluation
states apart, and never sees the token it predicts across a window boundary; a batch of lone
last tokens (a process whose streams all ended) has a zero loss that reaches every parameter."""

import json

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import DatasetReader, Vocabulary
from allennlp.models import Model

from elmo_plugin.data.elmo_streams_loader import ElmoStreamsLoader, stream_bounds
from elmo_plugin.training.sparse_gradient_sync import sparse_parameter_names
from tests.helpers import CONFIG_DIR, TINY_LSTM_OVERRIDES, TINY_TRANSFORMER_OVERRIDES

TINY = {k: v for k, v in TINY_LSTM_OVERRIDES.items() if not k.startswith("data_loader")}


def build(config: str, sizes: dict, vocab: Vocabulary, **model_options) -> Model:
    params = Params.from_file(str(CONFIG_DIR / config), json.dumps(sizes))
    model_params = params.pop("model")
    for key, value in model_options.items():
        model_params[key] = value
    model_params["dropout"] = 0.0
    torch.manual_seed(0)
    return Model.from_params(vocab=vocab, params=model_params).eval()


@pytest.fixture(scope="module")
def loader_and_vocab(tiny_corpus):
    reader = DatasetReader.from_params(Params({"type": "elmo_corpus", "max_sequence_length": 40}))
    loader = ElmoStreamsLoader(reader, str(tiny_corpus / "valid.txt"), batch_size=4, window_size=5)
    vocab = Vocabulary.from_instances(loader.iter_instances())
    loader.index_with(vocab)
    return loader, vocab


@pytest.fixture(scope="module")
def batches(loader_and_vocab):
    return list(loader_and_vocab[0])[:3]


def test_stateful_state_is_carried_detached_and_reset_where_a_stream_starts(
    loader_and_vocab, batches
):
    vocab = loader_and_vocab[1]
    stateful = build("elmo_lstm.jsonnet", TINY, vocab, stateful=True)
    stateless = build("elmo_lstm.jsonnet", TINY, vocab)
    with torch.no_grad():
        first = [m(**batches[0])["lm_embeddings"] for m in (stateful, stateless)]
        assert torch.equal(*first)  # window 0 starts every stream: zero state
        carried = stateful(**batches[1])["lm_embeddings"]
        fresh = stateless(**batches[1])["lm_embeddings"]
    assert not torch.allclose(carried, fresh)
    assert all(
        not h.requires_grad and not c.requires_grad for h, c in stateful._stream_state[False].layers
    )
    # Row 1 restarts: its outputs are those of zero state, the others' still carried.
    restart = dict(batches[1], stream_start=torch.tensor([False, True, False, False]))
    stateful(
        **batches[0]
    )  # with grad: the training path, whose float32 rounding differs from inference's
    with torch.no_grad():
        mixed = stateful(**restart)["lm_embeddings"]
    assert torch.equal(mixed[1], fresh[1]) and torch.allclose(mixed[0], carried[0], atol=1e-6)


def test_state_carried_over_windows_equals_one_long_window(loader_and_vocab, batches):
    """Two consecutive windows with state carried = their joined text read in one window."""
    vocab = loader_and_vocab[1]
    model = build("elmo_lstm.jsonnet", TINY, vocab, stateful=True)
    with torch.no_grad():
        parts = [model(**batch)["lm_embeddings"] for batch in batches[:2]]
        joined = {
            name: {
                indexer: {
                    key: torch.cat(
                        [batches[0][name][indexer][key], batches[1][name][indexer][key][:, 1:]],
                        dim=1,
                    )
                    for key in batches[0][name][indexer]
                }
                for indexer in batches[0][name]
            }
            for name in ("source", "backward_source")
        }
        whole = model(**joined, stream_start=batches[0]["stream_start"])["lm_embeddings"]
    assert torch.allclose(torch.cat(parts, dim=1), whole, atol=1e-5)


def test_no_leak_of_the_predicted_token_across_two_consecutive_batches(loader_and_vocab, batches):
    """The last token of window k (predicted there, read first in window k + 1) changed, in one
    direction's text at a time: window k's outputs and the state it carries are unchanged."""
    vocab = loader_and_vocab[1]
    model = build("elmo_lstm.jsonnet", TINY, vocab, stateful=True)
    with torch.no_grad():
        base = model(**batches[0])["lm_embeddings"]
        base_state = [(h.clone(), c.clone()) for h, c in model._stream_state[False].layers]
        for name in ("source", "backward_source"):
            changed = {**batches[0], name: {k: dict(v) for k, v in batches[0][name].items()}}
            chars = changed[name]["elmo"]["elmo_tokens"].clone()
            chars[:, -1] = chars[:, 0]  # another token in the last place
            changed[name]["elmo"]["elmo_tokens"] = chars
            # Float noise only (1e-8: the character CNN's matmuls see other rows); a leak
            # would move the outputs by about their size (1e-2).
            assert torch.allclose(model(**changed)["lm_embeddings"], base, rtol=0, atol=1e-7)
            for (h, c), (h2, c2) in zip(base_state, model._stream_state[False].layers, strict=True):
                assert torch.allclose(h, h2, rtol=0, atol=1e-7) and torch.allclose(
                    c, c2, rtol=0, atol=1e-7
                )
        # The changed token does change what follows it: window k + 1 reads it first.
        changed = {**batches[1], "source": {k: dict(v) for k, v in batches[1]["source"].items()}}
        chars = changed["source"]["elmo"]["elmo_tokens"].clone()
        chars[:, 0] = chars[:, 2]
        changed["source"]["elmo"]["elmo_tokens"] = chars
        model(**batches[0])
        next_base = model(**batches[1])["lm_embeddings"]
        model(**batches[0])
        assert not torch.allclose(
            model(**changed)["lm_embeddings"][..., :16], next_base[..., :16], rtol=0, atol=1e-4
        )


def test_training_and_evaluation_carry_separate_states(loader_and_vocab, batches):
    model = build("elmo_lstm.jsonnet", TINY, loader_and_vocab[1], stateful=True)
    model.train()
    model(**batches[0])
    model.eval()
    assert model._stream_state[False].layers is None
    assert model._stream_state[True].layers is not None


def test_stateful_transformer_is_a_configuration_error(loader_and_vocab):
    sizes = {k: v for k, v in TINY_TRANSFORMER_OVERRIDES.items() if not k.startswith("data_loader")}
    with pytest.raises(
        ConfigurationError, match="stateful needs a contextualizer that carries state"
    ):
        build("elmo_transformer.jsonnet", sizes, loader_and_vocab[1], stateful=True)


@pytest.fixture(scope="module")
def rank_0_of_2(tmp_path_factory):
    """(vocabulary, batches) of process 0 of 2 reading 45 tokens as 2 x 2 streams of 5-token
    windows: its streams have 11 tokens (2 windows), process 1's last one 12 (3 windows), so
    process 0's third and last batch holds each of its streams' last token alone."""
    assert stream_bounds(45, 4) == [0, 11, 22, 33, 45]
    corpus = tmp_path_factory.mktemp("lone_last_tokens") / "corpus.txt"
    corpus.write_text("".join(f"w{i} b c\n" for i in range(9)))  # <S> w b c </S>: 9 x 5 tokens
    reader = DatasetReader.from_params(Params({"type": "elmo_corpus"}))
    loader = ElmoStreamsLoader(reader, str(corpus), batch_size=2, window_size=5)
    loader.world_size, loader.rank = 2, 0  # as a distributed process sees it
    vocab = Vocabulary.from_instances(loader.iter_instances())
    loader.index_with(vocab)
    return vocab, list(loader)


@pytest.mark.parametrize(
    "config, sizes, options",
    [
        ("elmo_lstm_stateful.jsonnet", TINY, {}),
        ("elmo_lstm.jsonnet", TINY, {"num_samples": 5, "sparse_embeddings": True}),
    ],
    ids=["stateful-full-softmax", "sparse-sampled-softmax"],
)
def test_a_batch_of_lone_last_tokens_has_a_zero_loss_reaching_every_parameter_and_no_tokens(
    rank_0_of_2, config, sizes, options
):
    """Its loss is 0 with a graph: backward gives every trainable parameter a zero gradient
    (sparse ones sparse, as their peers' are), so DDP's all-reduce and the sparse gathering run
    as on the other processes; the perplexities, training and validation, count no token."""
    vocab, batches = rank_0_of_2
    *before, last = batches
    assert [batch["source"]["tokens"]["tokens"].size(1) for batch in batches] == [6, 6, 1]
    model = build(config, sizes, vocab, **options).train()
    for batch in before:
        model(**batch)
    metrics = model.get_metrics()
    assert metrics["perplexity"] > 1
    model.zero_grad(set_to_none=True)
    output = model(**last)
    assert output["loss"].item() == 0 and output["loss"].grad_fn is not None
    assert output["batch_weight"].item() == 0 and model.get_metrics() == metrics
    output["loss"].backward()
    sparse = set(sparse_parameter_names(model))
    assert len(sparse) == (2 if options else 0)
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            assert parameter.grad is not None, name
            assert parameter.grad.is_sparse == (name in sparse), name
            assert not parameter.grad.to_dense().any(), name
    model.eval()
    with torch.no_grad():
        output = model(**last)
    assert output["loss"].item() == 0 and model.get_metrics() == metrics


def test_fixed_shape_windows_give_the_stateful_lstm_the_same_losses_gradients_and_state(
    tiny_corpus,
):
    """Two epochs of `elmo_streams` windows with and without `fixed_shape` (which pads each
    epoch's last, shorter batch to full windows): the same loss and parameter gradients at every
    batch, the same perplexities, and the same carried state after every batch but an epoch's
    last. After that one a row whose window was the batch's longest has read its last token
    only when padded; its stream has ended, and the next window 0 starts from zero state."""
    reader = DatasetReader.from_params(Params({"type": "elmo_corpus", "max_sequence_length": 40}))
    epochs, models = [], []
    for fixed_shape in (False, True):
        loader = ElmoStreamsLoader(
            reader, str(tiny_corpus / "valid.txt"), 4, window_size=5, fixed_shape=fixed_shape
        )
        vocab = Vocabulary.from_instances(loader.iter_instances())
        loader.index_with(vocab)
        epochs.append(list(loader) + list(loader))
        sizes = {**TINY, "model.contextualizer.dropout": 0.0}
        models.append(build("elmo_lstm_stateful.jsonnet", sizes, vocab).train())
    widths = [[batch["source"]["tokens"]["tokens"].size(1) for batch in e] for e in epochs]
    per_epoch = len(widths[0]) // 2
    assert widths[0][per_epoch - 1] == 2 and set(widths[1]) == {6}  # the last batch padded
    for k, batches in enumerate(zip(*epochs, strict=True)):
        outputs = []
        for model, batch in zip(models, batches, strict=True):
            model.zero_grad(set_to_none=True)
            output = model(**batch)
            output["loss"].backward()
            outputs.append((output["loss"].item(), dict(model.named_parameters())))
        (loss, parameters), (padded_loss, padded_parameters) = outputs
        assert padded_loss == pytest.approx(loss, rel=1e-6)
        for name, parameter in parameters.items():
            assert torch.allclose(
                padded_parameters[name].grad, parameter.grad, rtol=1e-5, atol=1e-7
            ), name
        if k % per_epoch != per_epoch - 1:
            states = [model._stream_state[True].layers for model in models]
            for (h, c), (padded_h, padded_c) in zip(*states, strict=True):
                assert torch.allclose(padded_h, h, atol=1e-6)
                assert torch.allclose(padded_c, c, atol=1e-6)
    metrics = [model.get_metrics() for model in models]
    assert metrics[1] == pytest.approx(metrics[0], rel=1e-6)
