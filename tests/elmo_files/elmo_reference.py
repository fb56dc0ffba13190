"""Helpers for comparing our modules with allennlp's own ELMo reader (`allennlp.modules.elmo`)."""

from pathlib import Path
from typing import Optional, cast

import h5py
import numpy
import torch
from allennlp.data.token_indexers.elmo_indexer import ELMoCharacterMapper
from allennlp.modules.elmo import Elmo, batch_to_ids
from allennlp.nn.util import add_sentence_boundary_token_ids

from elmo_plugin.elmo_files.options import architecture_from_options
from elmo_plugin.elmo_files.weights import write_bilm_encoder
from elmo_plugin.modules.bilm_encoder import BiLmEncoder
from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn

TOLERANCE = 1e-5


SENTENCES = [
    "The cat sat on the mat .".split(),
    ["Hello"],
    "Résumé naïve café — ünïcödé tokens , and a very long one".split()
    + ["pneumonoultramicroscopicsilicovolcanoconiosis" * 2],
    "a b c d e f g h i j k l m n o p".split(),
    "the the the the .".split(),
    "Short one".split(),
    "Another sentence with some words that repeat some words".split(),
]


def tiny_options(clip: Optional[float], activation: str = "relu") -> dict:
    return {
        "lstm": {
            "use_skip_connections": True,
            "projection_dim": 16,
            "dim": 24,
            "n_layers": 2,
            "cell_clip": clip,
            "proj_clip": clip,
        },
        "char_cnn": {
            "activation": activation,
            "filters": [[1, 4], [2, 8], [3, 8], [5, 16]],
            "n_highway": 2,
            "embedding": {"dim": 8},
            "n_characters": 262,
            "max_characters_per_token": 50,
        },
    }


def random_encoder(clip: Optional[float], seed: int = 0, activation: str = "relu") -> BiLmEncoder:
    """A tiny encoder with random weights large enough that clipping matters."""
    generator = torch.Generator().manual_seed(seed)
    encoder = BiLmEncoder.from_architecture(
        architecture_from_options(tiny_options(clip, activation))
    )
    with torch.no_grad():
        for parameter in encoder.parameters():
            scale = 0.3
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
        assert isinstance(encoder.char_cnn, ElmoCharCnn)
        encoder.char_cnn.char_embedding.weight[0] = 0.0
    return encoder.eval()


def write_pair(encoder: BiLmEncoder, folder: Path) -> tuple[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    options, weights = str(folder / "options.json"), str(folder / "weights.hdf5")
    write_bilm_encoder(encoder, options, weights)
    return options, weights


def allennlp_elmo(options_file: str, weights_file: str, **kwargs) -> Elmo:
    return Elmo(
        options_file, weights_file, num_output_representations=1, dropout=0.0, **kwargs
    ).eval()


def allennlp_layers(elmo: Elmo, char_ids: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """allennlp's biLM layers (with <S>/</S>) from zero state (its ElmoLstm keeps state)."""
    # (allennlp assigns Elmo._elmo_lstm under its own type: ignore, so mypy cannot type it)
    bilm = elmo._elmo_lstm  # type: ignore[has-type]
    bilm._elmo_lstm.reset_states()
    with torch.no_grad():
        output = bilm(char_ids)
    return output["activations"], output["mask"]


def with_boundaries(char_ids: torch.Tensor) -> torch.Tensor:
    mask = cast(torch.BoolTensor, (char_ids > 0).any(dim=-1))
    bos = torch.from_numpy(numpy.array(ELMoCharacterMapper.beginning_of_sentence_characters) + 1)
    eos = torch.from_numpy(numpy.array(ELMoCharacterMapper.end_of_sentence_characters) + 1)
    return add_sentence_boundary_token_ids(char_ids, mask, bos, eos)[0]


def batches(sizes=(1, 3, 7)) -> list[torch.Tensor]:
    """Char-id batches of several sizes, with padding (sentences of different lengths)."""
    out, start = [], 0
    for size in sizes:
        chosen = [SENTENCES[(start + offset) % len(SENTENCES)] for offset in range(size)]
        start += size
        out.append(batch_to_ids(chosen))
    return out


def max_diff(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> float:
    assert len(ours) == len(theirs)
    return max(float((a - b).detach().abs().max()) for a, b in zip(ours, theirs, strict=True))


def write_random_tf_pair(folder: Path, options: dict, seed: int = 0) -> tuple[str, str]:
    """options.json + weights.hdf5 written directly with h5py in the published layout (shapes as
    allennlp's reader expects), random values: independent of our writer."""
    import json

    rng = numpy.random.default_rng(seed)
    cnn, lstm = options["char_cnn"], options["lstm"]
    dim, proj, cells = cnn["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    filters = sum(count for _, count in cnn["filters"])
    arrays = {"char_embed": rng.normal(0, 0.3, (261, dim))}
    for i, (width, count) in enumerate(cnn["filters"]):
        arrays[f"CNN/W_cnn_{i}"] = rng.normal(0, 0.3, (1, width, dim, count))
        arrays[f"CNN/b_cnn_{i}"] = rng.normal(0, 0.3, (count,))
    for k in range(cnn["n_highway"]):
        for name, shape in [
            ("W_transform", (filters, filters)),
            ("W_carry", (filters, filters)),
            ("b_transform", (filters,)),
            ("b_carry", (filters,)),
        ]:
            arrays[f"CNN_high_{k}/{name}"] = rng.normal(0, 0.3, shape)
    arrays["CNN_proj/W_proj"] = rng.normal(0, 0.3, (filters, proj))
    arrays["CNN_proj/b_proj"] = rng.normal(0, 0.3, (proj,))
    for d in range(2):
        for layer in range(lstm["n_layers"]):
            prefix = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            arrays[f"{prefix}/W_0"] = rng.normal(0, 0.3, (2 * proj, 4 * cells))
            arrays[f"{prefix}/B"] = rng.normal(0, 0.3, (4 * cells,))
            arrays[f"{prefix}/W_P_0"] = rng.normal(0, 0.3, (cells, proj))
    folder.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "weights.hdf5", "w") as out:
        for name, array in arrays.items():
            out.create_dataset(name, data=array.astype(numpy.float32))
    (folder / "options.json").write_text(json.dumps(options))
    return str(folder / "options.json"), str(folder / "weights.hdf5")


def transformer_bilm_folder(folder: Path):
    """A tiny transformer `elmo_bilm` saved as a serialization folder (config.json, weights.th,
    vocabulary/), which allennlp's load_archive reads like a model.tar.gz -> (folder, model)."""
    import json

    from allennlp.common import Params
    from allennlp.data import Vocabulary
    from allennlp.models import Model

    config = {
        "type": "elmo_bilm",
        "text_field_embedder": {
            "token_embedders": {
                "elmo": {
                    "type": "elmo_char_cnn",
                    "filters": [[1, 4], [2, 8]],
                    "num_highway": 1,
                    "projection_dim": 16,
                },
                "tokens": {"type": "empty"},
            }
        },
        "contextualizer": {
            "type": "elmo_transformer",
            "input_dim": 16,
            "feedforward_hidden_dim": 32,
            "num_layers": 2,
            "num_attention_heads": 2,
            "dropout": 0.1,
        },
    }
    vocab = Vocabulary()
    vocab.add_tokens_to_namespace(["<S>", "</S>", "the"], "tokens")
    model = Model.from_params(Params(json.loads(json.dumps(config))), vocab=vocab).eval()
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"dataset_reader": {"type": "elmo_corpus"}, "model": config})
    )
    torch.save(model.state_dict(), folder / "weights.th")
    vocab.save_to_files(str(folder / "vocabulary"))
    return folder, model
