"""Archives made by the code before the one-way layering (fixtures/archives_before_layering: old
Python names, contextualizer key `hidden_dim`, the tagger's recorded biLM architecture with the
old keys) load with today's code and predict exactly what they predicted then."""

import io
import json
import tarfile

import pytest

from elmo_plugin.models.elmo_bilm import DEPRECATED_TF32
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


def predict(archive_file, predictor, output):
    """`allennlp predict` of the fixture sentences -> the CLI result."""
    return run_allennlp(
        [
            "predict",
            str(archive_file),
            str(FIXTURES / "sentences.jsonl"),
            "--predictor",
            predictor,
            "--output-file",
            str(output),
            "--silent",
        ]
    )


def check_predictions(archive, output):
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


@pytest.mark.parametrize("archive, predictor", CASES)
def test_old_archive_predicts_what_it_predicted_before(archive, predictor, tmp_path):
    output = tmp_path / "predictions.jsonl"
    predict(FIXTURES / f"{archive}.tar.gz", predictor, output)
    check_predictions(archive, output)


def with_model_key(source, target, key: str, value) -> None:
    """A copy of the archive `source` whose config.json has `model.KEY = value`."""
    with tarfile.open(source) as original, tarfile.open(target, "w:gz") as copy:
        for member in original.getmembers():
            data = original.extractfile(member) if member.isfile() else None
            if member.name == "config.json":
                assert data is not None  # config.json is a file
                config = json.load(data)
                config["model"][key] = value
                text = json.dumps(config, indent=4).encode()
                member.size, data = len(text), io.BytesIO(text)
            copy.addfile(member, data)


def test_old_archive_with_model_tf32_predicts_the_same_and_logs_one_deprecation_line(tmp_path):
    """`model.tf32` (before it became a process setting) still loads: ignored, one log line."""
    archive = tmp_path / "bilm_lstm_tf32.tar.gz"
    with_model_key(FIXTURES / "bilm_lstm.tar.gz", archive, "tf32", True)
    output = tmp_path / "predictions.jsonl"
    result = predict(archive, "elmo_embeddings", output)
    check_predictions("bilm_lstm", output)
    lines = (result.stdout + result.stderr).splitlines()
    deprecations = [line for line in lines if "deprecated" in line and "tf32" in line]
    assert len(deprecations) == 1 and deprecations[0].endswith(DEPRECATED_TF32 % True)
