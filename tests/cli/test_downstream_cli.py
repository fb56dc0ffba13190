"""Downstream configs end to end: `allennlp train` / `evaluate` (in this process) on CoNLL-U with
our ELMo."""

import json
from pathlib import Path

import pytest
from allennlp.models.archival import load_archive

from tests.helpers import CONFIG_DIR, hidden, overrides, run_allennlp_in_process

FAST = {
    "trainer.num_epochs": 6,
    "data_loader.batch_sampler.batch_size": 8,
    "trainer.optimizer.lr": 0.01,
}


def test_elmo_tagger_learns_the_layer_mix_and_its_archive_stands_alone(
    tiny_elmo_tagger_archive, tiny_tagged_data, plugin_cwd
):
    metrics = json.loads((tiny_elmo_tagger_archive.parent / "metrics.json").read_text())
    assert metrics["best_validation_accuracy"] > 0.9
    assert metrics["training_reg_loss"] > 0  # the L2 penalty on the scalar mix weights is applied
    # With the biLM gone, the archive loads (allennlp drops pretrained_file) and evaluates the same.
    bilm = Path(
        json.loads((tiny_elmo_tagger_archive.parent / "config.json").read_text())["model"][
            "text_field_embedder"
        ]["token_embedders"]["elmo"]["pretrained_file"]
    )
    with hidden(bilm):
        run_allennlp_in_process(
            [
                "evaluate",
                str(tiny_elmo_tagger_archive),
                str(tiny_tagged_data / "valid.conllu"),
                "--output-file",
                "metrics.json",
            ],
            cwd=plugin_cwd,
        )
    evaluated = json.loads((plugin_cwd / "metrics.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(metrics["best_validation_accuracy"], abs=1e-6)
    parameters = dict(load_archive(str(tiny_elmo_tagger_archive)).model.named_parameters())
    mix = {name: value for name, value in parameters.items() if "scalar_mix" in name}
    assert len(mix) == 4  # three layer weights s_j and gamma
    scalars = [value.item() for name, value in mix.items() if "scalar_parameters" in name]
    assert max(abs(s) for s in scalars) > 1e-3  # trained away from the initial 0
    assert not any(value.requires_grad for name, value in parameters.items() if ".bilm." in name)


def with_unseen_labels(source: Path, target: Path, column: int, label: str) -> int:
    """`source` with every token of the first 3 sentences labelled `label` in CoNLL-U `column`
    (3: UPOS, 7: relation) -> how many tokens were relabelled."""
    lines, changed, sentences = [], 0, 0
    for line in source.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        sentences += not line
        if len(fields) == 10 and sentences < 3:
            fields[column] = label
            changed += 1
        lines.append("\t".join(fields))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def test_tagger_scores_a_label_unseen_in_training_as_an_error_with_a_counted_warning(
    tiny_elmo_tagger_archive, tiny_tagged_data, plugin_cwd
):
    valid = tiny_tagged_data / "valid.conllu"
    unseen = plugin_cwd / "unseen.conllu"
    changed = with_unseen_labels(valid, unseen, 3, "INTJ")  # no INTJ in the training data
    total = sum(len(line.split("\t")) == 10 for line in valid.read_text().splitlines())
    scores = {}
    for name, path in (("valid", valid), ("unseen", unseen)):
        result = run_allennlp_in_process(
            ["evaluate", str(tiny_elmo_tagger_archive), str(path), "--output-file", f"{name}.json"],
            cwd=plugin_cwd,
        )
        scores[name] = json.loads((plugin_cwd / f"{name}.json").read_text())["accuracy"]
    log = result.stdout + result.stderr
    assert "label 'INTJ' is not in the training vocabulary's namespace 'labels'" in log
    assert "(1 occurrence so far)" in log and "(10 occurrences so far)" in log and changed >= 10
    # each relabelled token is an error: at most `changed` fewer correct tokens than before
    assert scores["valid"] - changed / total - 1e-6 <= scores["unseen"] < scores["valid"]
    predicted = run_allennlp_in_process(
        [
            "predict",
            str(tiny_elmo_tagger_archive),
            str(unseen),
            "--use-dataset-reader",
            "--predictor",
            "whitespace_tagger",
            "--output-file",
            "tags.jsonl",
            "--silent",
        ],
        cwd=plugin_cwd,
    )
    assert predicted.returncode == 0
    rows = (plugin_cwd / "tags.jsonl").read_text().splitlines()
    assert len(rows) == unseen.read_text().count("# sent_id")
    assert "INTJ" not in {tag for row in rows for tag in json.loads(row)["tags"]}


def test_baseline_tagger_has_no_elmo(tiny_tagged_data, plugin_cwd):
    values = dict(
        FAST,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
    )
    run_allennlp_in_process(
        [
            "train",
            str(CONFIG_DIR / "pos_tagger_baseline.jsonnet"),
            "-s",
            "out",
            "-o",
            overrides(values),
        ],
        cwd=plugin_cwd,
    )
    metrics = json.loads((plugin_cwd / "out" / "metrics.json").read_text())
    assert metrics["best_validation_accuracy"] > 0.9 and metrics["training_reg_loss"] == 0
    config = json.loads((plugin_cwd / "out" / "config.json").read_text())
    assert list(config["model"]["text_field_embedder"]["token_embedders"]) == ["tokens"]


def test_dependency_parser_with_elmo(tiny_bilm_archive, tiny_tagged_data, plugin_cwd):
    values = dict(
        FAST,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
        **{
            "model.text_field_embedder.token_embedders.elmo.pretrained_file": str(
                tiny_bilm_archive
            ),
            "model.encoder.input_size": 2 * 16 + 32 + 16,
            "model.encoder.hidden_size": 32,
            "model.arc_representation_dim": 32,
            "model.tag_representation_dim": 16,
            "trainer.num_epochs": 5,
        },
    )
    run_allennlp_in_process(
        [
            "train",
            str(CONFIG_DIR / "dependency_parser_elmo.jsonnet"),
            "-s",
            "out",
            "-o",
            overrides(values),
        ],
        cwd=plugin_cwd,
    )
    metrics = json.loads((plugin_cwd / "out" / "metrics.json").read_text())
    # Chance (a random head among ~8 words) is ~0.15; the template grammar is easy to learn.
    assert metrics["best_validation_UAS"] > 0.6 and metrics["best_validation_LAS"] > 0.4
    # A relation the training data never had (allennlp's default vocabulary: a KeyError).
    unseen = plugin_cwd / "unseen.conllu"
    with_unseen_labels(tiny_tagged_data / "valid.conllu", unseen, 7, "csubj:pass")
    result = run_allennlp_in_process(
        ["evaluate", "out/model.tar.gz", str(unseen), "--output-file", "unseen.json"],
        cwd=plugin_cwd,
    )
    assert "label 'csubj:pass' is not in the training vocabulary's namespace 'head_tags'" in (
        result.stdout + result.stderr
    )
    evaluated = json.loads((plugin_cwd / "unseen.json").read_text())
    assert evaluated["LAS"] < metrics["best_validation_LAS"]
