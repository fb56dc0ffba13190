"""The pretraining size ladder: the small, medium and original LSTM configs build the published
ELMo sizes (the README's table of configs), checked through the options.json that our
exporter writes for the model each config builds."""

import pytest
from allennlp.common import Params
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.elmo_files.options import encoder_options
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from tests.helpers import CONFIG_DIR, PUBLISHED_SIZES, REPO_ROOT, published_options


@pytest.mark.parametrize("size", sorted(PUBLISHED_SIZES))
def test_the_size_ladder_builds_the_published_elmo_sizes(size):
    model = Params.from_file(str(CONFIG_DIR / f"elmo_lstm_{size}.jsonnet")).as_dict()["model"]
    cnn = TokenEmbedder.from_params(Params(model["text_field_embedder"]["token_embedders"]["elmo"]))
    lstm = Seq2SeqEncoder.from_params(Params(model["contextualizer"]))
    dim, projection, highway = PUBLISHED_SIZES[size]
    assert encoder_options(BiLmEncoder(cnn, lstm)) == published_options(dim, projection, highway)
    # the original's training regime throughout the ladder
    assert (model["num_samples"], model["sparse_embeddings"]) == (8192, True)


@pytest.mark.parametrize(
    "config",
    [
        "elmo_lstm_original",
        "elmo_lstm_small",
        "elmo_lstm_medium",
        "elmo_lstm_original_stateful",
        "elmo_transformer_original",
    ],
)
def test_the_original_configs_train_on_batches_of_one_shape_and_say_so(config):
    path = CONFIG_DIR / f"{config}.jsonnet"
    assert Params.from_file(str(path)).as_dict()["data_loader"]["fixed_shape"] is True
    header = path.read_text().split("\nlocal ", 1)[0].split("\n{", 1)[0]
    assert "Every training batch has one shape" in header and "fixed_shape" in header


def test_the_docs_checkpoint_size_at_the_original_size_is_its_weights_and_adagrad_state():
    """elmo_lstm_original.jsonnet at 1B Word's 793,471 words: its character CNN and LSTM plus
    a softmax row (512 weights and a bias) per word, float32, twice (Adagrad's accumulators)."""
    model = Params.from_file(str(CONFIG_DIR / "elmo_lstm_original.jsonnet")).as_dict()["model"]
    cnn = TokenEmbedder.from_params(Params(model["text_field_embedder"]["token_embedders"]["elmo"]))
    lstm = Seq2SeqEncoder.from_params(Params(model["contextualizer"]))
    encoder = sum(p.numel() for module in (cnn, lstm) for p in module.parameters())
    gigabytes = 2 * 4 * (encoder + 793_471 * (512 + 1)) / 1e9
    text = " ".join((REPO_ROOT / "docs" / "pretraining.md").read_text(encoding="utf-8").split())
    assert f"the Adagrad accumulators are about {gigabytes:.1f} GB" in text
