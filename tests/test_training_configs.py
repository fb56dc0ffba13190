"""The pretraining size ladder: the small, medium and original LSTM configs build the published
ELMo sizes (../shared/docs/elmo-format.md's table), checked through the options.json that our
exporter writes for the model each config builds."""

import pytest
from allennlp.common import Params
from allennlp.modules.seq2seq_encoders import Seq2SeqEncoder
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.elmo_files.options import encoder_options
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from tests.helpers import CONFIG_DIR

FILTERS_2048 = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
# name: (LSTM dim, projection, highway layers)
PUBLISHED = {"small": (1024, 128, 1), "medium": (2048, 256, 1), "original": (4096, 512, 2)}


@pytest.mark.parametrize("size", sorted(PUBLISHED))
def test_the_size_ladder_builds_the_published_elmo_sizes(size):
    model = Params.from_file(str(CONFIG_DIR / f"elmo_lstm_{size}.jsonnet")).as_dict()["model"]
    cnn = TokenEmbedder.from_params(Params(model["text_field_embedder"]["token_embedders"]["elmo"]))
    lstm = Seq2SeqEncoder.from_params(Params(model["contextualizer"]))
    dim, projection, highway = PUBLISHED[size]
    assert encoder_options(BiLmEncoder(cnn, lstm)) == {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": projection,
            "cell_clip": 3,
            "proj_clip": 3,
            "dim": dim,
            "n_layers": 2,
        },
        "char_cnn": {
            "activation": "relu",
            "filters": FILTERS_2048,
            "n_highway": highway,
            "embedding": {"dim": 16},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }
    # the original's training regime throughout the ladder
    assert (model["num_samples"], model["sparse_embeddings"]) == (8192, True)
