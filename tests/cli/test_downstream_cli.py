"""Downstream configs end to end: `allennlp train` / `evaluate` (in this process) on CoNLL-U with
our ELMo."""

import json
from pathlib import Path
from typing import cast

import pytest
import torch
from allennlp.data.fields import TextField
from allennlp.models.archival import load_archive

from elmo_plugin.archives.bilm_source import load_bilm_encoder
from elmo_plugin.data.conllu_tagging_reader import ConlluTaggingReader
from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.modules.precomputed_layers import PrecomputedLayers
from tests.helpers import (
    CONFIG_DIR,
    evaluation,
    hidden,
    predictions,
    run_allennlp_in_process,
    train_args,
)

FAST = {
    "trainer.num_epochs": 6,
    "data_loader.batch_sampler.batch_size": 8,
    "trainer.optimizer.lr": 0.01,
}


def evaluated_accuracy(archive: str, tagged_data: Path, cwd: Path) -> float:
    """`allennlp evaluate ARCHIVE` on the tiny validation file -> its accuracy."""
    metrics = evaluation(archive, tagged_data / "valid.conllu", cwd / "metrics.json", cwd=cwd)
    return metrics["accuracy"]


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
        accuracy = evaluated_accuracy(str(tiny_elmo_tagger_archive), tiny_tagged_data, plugin_cwd)
    assert accuracy == pytest.approx(metrics["best_validation_accuracy"], abs=1e-6)
    parameters = dict(load_archive(str(tiny_elmo_tagger_archive)).model.named_parameters())
    mix = {name: value for name, value in parameters.items() if "scalar_mix" in name}
    assert len(mix) == 4  # three layer weights s_j and gamma
    scalars = [value.item() for name, value in mix.items() if "scalar_parameters" in name]
    assert max(abs(s) for s in scalars) > 1e-3  # trained away from the initial 0
    assert not any(value.requires_grad for name, value in parameters.items() if ".bilm." in name)


def test_tagger_on_precomputed_layers_trains_as_the_tagger_on_the_biLM(
    tiny_elmo_tagger_archive, tiny_bilm_archive, tiny_tagged_data, plugin_cwd
):
    """`elmo-embed` the sentences once, train the same tagger reading them: the same training
    (the fixture's seeds and settings) within float32 rounding, and it evaluates the same."""
    sentences = plugin_cwd / "sentences.txt"
    sentences.write_text(
        "".join(
            " ".join(line.split("\t")[1] for line in block.splitlines() if "\t" in line) + "\n"
            for name in ("train.conllu", "valid.conllu")
            for block in (tiny_tagged_data / name).read_text().split("\n\n")
            if "\t" in block
        )
    )
    run_allennlp_in_process(
        ["elmo-embed", str(tiny_bilm_archive), str(sentences), "layers.hdf5"], cwd=plugin_cwd
    )
    # every sentence the tagger's reader and indexer make is found in the file
    layers = PrecomputedLayers(str(plugin_cwd / "layers.hdf5"), 3, 32)
    indexer = ElmoCharIdsIndexer()
    for instance in ConlluTaggingReader().read(str(tiny_tagged_data / "valid.conllu")):
        tokens = cast(TextField, instance["tokens"]).tokens
        assert layers.find(torch.tensor(indexer.char_ids_of([t.text for t in tokens]))) is not None
    config = json.loads((tiny_elmo_tagger_archive.parent / "config.json").read_text())
    config["model"]["text_field_embedder"]["token_embedders"]["elmo"]["precomputed_layers"] = str(
        plugin_cwd / "layers.hdf5"
    )
    (plugin_cwd / "config.json").write_text(json.dumps(config))
    run_allennlp_in_process(["train", "config.json", "-s", "out"], cwd=plugin_cwd)
    plain = json.loads((tiny_elmo_tagger_archive.parent / "metrics.json").read_text())
    cached = json.loads((plugin_cwd / "out" / "metrics.json").read_text())
    assert cached["training_loss"] == pytest.approx(plain["training_loss"], rel=1e-3)
    assert cached["best_validation_accuracy"] == pytest.approx(
        plain["best_validation_accuracy"], abs=0.01
    )
    accuracy = evaluated_accuracy("out/model.tar.gz", tiny_tagged_data, plugin_cwd)
    assert accuracy == pytest.approx(cached["best_validation_accuracy"], abs=1e-6)


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
    summary = f"{changed} gold labels not in the training vocabulary, scored as errors: "
    assert f"elmo_evaluator: {summary}'INTJ' in 'labels' x{changed}\n" in log  # after the file
    # each relabelled token is an error: at most `changed` fewer correct tokens than before
    assert scores["valid"] - changed / total - 1e-6 <= scores["unseen"] < scores["valid"]
    tagger = ("--use-dataset-reader", "--predictor", "whitespace_tagger")
    rows = predictions(tiny_elmo_tagger_archive, unseen, *tagger, cwd=plugin_cwd)
    assert len(rows) == unseen.read_text().count("# sent_id")
    assert "INTJ" not in {tag for row in rows for tag in row["tags"]}


def test_baseline_tagger_has_no_elmo(tiny_tagged_data, plugin_cwd):
    values = dict(
        FAST,
        train_data_path=str(tiny_tagged_data / "train.conllu"),
        validation_data_path=str(tiny_tagged_data / "valid.conllu"),
    )
    run_allennlp_in_process(
        train_args(CONFIG_DIR / "pos_tagger_baseline.jsonnet", "out", values), cwd=plugin_cwd
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
        train_args(CONFIG_DIR / "dependency_parser_elmo.jsonnet", "out", values), cwd=plugin_cwd
    )
    metrics = json.loads((plugin_cwd / "out" / "metrics.json").read_text())
    # Chance (a random head among ~8 words) is ~0.15; the template grammar is easy to learn.
    assert metrics["best_validation_UAS"] > 0.6 and metrics["best_validation_LAS"] > 0.4
    # The parser's initializer leaves the frozen biLM as pretrained (its regexes match the
    # biLM's LSTM and projection weights).
    pretrained = load_bilm_encoder(str(tiny_bilm_archive)).state_dict()
    parser = load_archive(str(plugin_cwd / "out" / "model.tar.gz")).model.state_dict()
    prefix = "text_field_embedder.token_embedder_elmo.bilm."
    assert {name[len(prefix) :] for name in parser if name.startswith(prefix)} == set(pretrained)
    for name, value in pretrained.items():
        assert torch.equal(parser[prefix + name], value), name
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
