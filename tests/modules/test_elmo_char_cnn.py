import torch
from allennlp.common import Params
from allennlp.modules.token_embedders import TokenEmbedder

from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn


def make_cnn(**kwargs) -> ElmoCharCnn:
    torch.manual_seed(0)
    return ElmoCharCnn(filters=[[1, 4], [2, 6], [3, 8]], num_highway=2, projection_dim=5, **kwargs)


def test_deduplicated_forward_equals_per_token_encoding():
    cnn = make_cnn()
    ids = torch.randint(1, 262, (4, 6, 50))
    ids[1, 2] = ids[0, 0]  # repeated tokens
    ids[3, 4:] = 0  # padding
    out = cnn(ids)
    assert out.shape == (4, 6, 5)
    expected = cnn.encode_distinct(ids.view(-1, 50)).view(4, 6, 5)
    real = (ids > 0).any(-1)
    assert torch.allclose(out[real], expected[real], atol=1e-6)
    assert torch.all(out[~real] == 0)
    assert torch.equal(out[1, 2], out[0, 0])


def test_gradients_reach_every_parameter_through_deduplication():
    cnn = make_cnn(activation="tanh")
    ids = torch.randint(1, 262, (2, 3, 50))
    cnn(ids).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for name, p in cnn.named_parameters() if "char_embedding" not in name)
    assert cnn.char_embedding.weight.grad[0].abs().sum() == 0  # padding id stays zero


def test_registered_and_built_from_params():
    cnn = TokenEmbedder.from_params(
        Params({"type": "elmo_char_cnn", "filters": [[1, 4], [2, 4]], "num_highway": 1, "projection_dim": 3})
    )
    assert isinstance(cnn, ElmoCharCnn) and cnn.get_output_dim() == 3
    assert cnn.highways._layers[0].weight.shape == (16, 8)
