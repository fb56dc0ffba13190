"""Our biLM archives as `archive_file` of allennlp-models' `bidirectional_lm_token_embedder` and
`language_model_token_embedder`: they mix exactly the layers our `elmo_bilm_embedder` gives."""

import pytest
import torch
from allennlp.data import Vocabulary
from allennlp.models.archival import load_archive
from allennlp_models.lm.modules.token_embedders.bidirectional_lm import (
    BidirectionalLanguageModelTokenEmbedder,
)
from allennlp_models.lm.modules.token_embedders.language_model import LanguageModelTokenEmbedder

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder

TOLERANCE = 1e-5
SENTENCES = [["the", "cat", "sat", "on", "the", "mat"], ["a", "b"], ["unseenword", "."]]


def char_ids(sentences: list[list[str]]) -> torch.Tensor:
    """(sentences, longest, 50) ELMo character ids, right-padded with 0."""
    indexer = ElmoCharIdsIndexer()
    ids = torch.zeros(len(sentences), max(map(len, sentences)), 50, dtype=torch.long)
    for row, sentence in enumerate(sentences):
        ids[row, : len(sentence)] = torch.tensor([indexer.char_ids(token) for token in sentence])
    return ids


def mixed_layers(embedder: LanguageModelTokenEmbedder, ids: torch.Tensor) -> list[torch.Tensor]:
    """The layers allennlp-models' embedder hands its ScalarMix (with `<S>`/`</S>`)."""
    captured = []
    hook = embedder._scalar_mix.register_forward_hook(
        lambda module, inputs, output: captured.append(inputs[0])
    )
    with torch.no_grad():
        embedder(ids)
    hook.remove()
    return captured[0]


@pytest.mark.parametrize(
    "embedder_class", [BidirectionalLanguageModelTokenEmbedder, LanguageModelTokenEmbedder]
)
@pytest.mark.parametrize("archive", ["tiny_bilm_archive", "tiny_transformer_archive"])
def test_allennlp_models_embedder_mixes_the_layers_of_our_embedder(
    archive, embedder_class, request
):
    path = str(request.getfixturevalue(archive))
    theirs = embedder_class(archive_file=path).eval()
    ours = ElmoBiLmEmbedder(Vocabulary(), pretrained_file=path, dropout=0.0).eval()
    ids = char_ids(SENTENCES)
    with torch.no_grad():
        our_layers, _ = ours.layers(ids)
        expected, actual = ours(ids), theirs(ids)  # both mixes start as the plain average
    their_layers = mixed_layers(theirs, ids)
    assert len(their_layers) == len(our_layers) == 3
    for their_layer, our_layer in zip(their_layers, our_layers, strict=True):
        assert their_layer.shape == our_layer.shape == (3, 6 + 2, 32)
        assert float((their_layer - our_layer).abs().max()) <= TOLERANCE
    assert actual.shape == expected.shape == (3, 6, 32)
    assert float((actual - expected).abs().max()) <= TOLERANCE


def test_our_archived_reader_config_names_its_indexers(tiny_bilm_archive):
    """allennlp-models' embedders read `dataset_reader.token_indexers` from the archived config."""
    indexers = load_archive(str(tiny_bilm_archive)).config.as_dict()["dataset_reader"][
        "token_indexers"
    ]
    assert indexers == {"tokens": {"type": "single_id"}, "elmo": {"type": "elmo_char_ids"}}
