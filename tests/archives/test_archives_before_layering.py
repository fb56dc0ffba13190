"""Archives made by the code before the one-way layering (fixtures/archives_before_layering: old
Python names, contextualizer key `hidden_dim`, the tagger's recorded biLM architecture with the
old keys) load with today's code and predict exactly what they predicted then."""

import json

import pytest

from tests.helpers import REPO_ROOT, run_allennlp

FIXTURES = REPO_ROOT / "fixtures" / "archives_before_layering"
CASES = [
    ("bilm_lstm", "elmo_embeddings"),
    ("bilm_transformer", "elmo_embeddings"),
    ("tagger", "whitespace_tagger"),
]


def max_difference(got, want) -> float:
    """Largest absolute difference between two equally nested lists of numbers."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        return max((max_difference(g, w) for g, w in zip(got, want, strict=True)), default=0.0)
    return abs(got - want)


@pytest.mark.parametrize("archive, predictor", CASES)
def test_old_archive_predicts_what_it_predicted_before(archive, predictor, tmp_path):
    output = tmp_path / "predictions.jsonl"
    run_allennlp(
        [
            "predict",
            str(FIXTURES / f"{archive}.tar.gz"),
            str(FIXTURES / "sentences.jsonl"),
            "--predictor",
            predictor,
            "--output-file",
            str(output),
            "--silent",
        ]
    )
    got = [json.loads(line) for line in output.read_text().splitlines()]
    want = [
        json.loads(line)
        for line in (FIXTURES / f"{archive}.predictions.jsonl").read_text().splitlines()
    ]
    assert len(got) == len(want) == 3
    for new, old in zip(got, want, strict=True):
        assert new.keys() == old.keys()
        for key, value in old.items():
            if key in ("tokens", "tags", "words"):
                assert new[key] == value, key
            else:
                assert max_difference(new[key], value) <= 1e-5, key
