"""`allennlp elmo-continue` end to end through the CLI (in this process; refusals in processes of
their own), tiny sizes: an ELMo in the published layout (an `elmo-export` of the session's tiny
biLM, files renamed the way the published downloads are) is continued with nothing but data
paths; the archive then works with the folder gone."""

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Optional

import pytest
import torch
from allennlp.models.archival import load_archive

from elmo_plugin.data.elmo_vocab_file import read_elmo_vocab_file
from elmo_plugin.elmo_files.options import architecture_from_options
from elmo_plugin.elmo_files.softmax import read_softmax
from elmo_plugin.elmo_files.weights import read_bilm_encoder
from tests.helpers import evaluation, run_allennlp, run_allennlp_in_process

PREFIX = "elmo_2x32_16_32cnn_1xhighway_"  # published-style names: PREFIX + options.json, ...


def published_folder(exported: Path, target: Path, with_vocab: bool) -> Path:
    """The exported files renamed like the published downloads; vocab.txt and the softmax only
    `with_vocab` (the published pairs have neither)."""
    target.mkdir()
    shutil.copy(exported / "options.json", target / f"{PREFIX}options.json")
    shutil.copy(exported / "weights.hdf5", target / f"{PREFIX}weights.hdf5")
    if with_vocab:
        shutil.copy(exported / "vocab.txt", target / "vocab.txt")
        shutil.copy(exported / "softmax.hdf5", target / f"{PREFIX}softmax.hdf5")
    return target


def elmo_continue(
    source, out: Path, corpus: Path, *extra: str, refused: bool = False, check: bool = True
):
    """`allennlp elmo-continue` in this process (a failure fails the test with `check`); one
    expected to be `refused`: a process of its own (its exit status and one-line error are the
    claim), not checked."""
    args = ["elmo-continue", str(source), "-s", str(out)]
    args += ["--train-data-path", str(corpus / "train" / "shard_0.txt")]
    args += ["--validation-data-path", str(corpus / "valid.txt"), *extra]
    if refused:
        return run_allennlp(args, check=False)
    return run_allennlp_in_process(args, check=check)


# Corpora that stop a run once its trainer is built (the folder's vocabulary: no text is read
# before), or before: name -> (train shard, valid.txt), bytes; None: the tiny corpus's file,
# MISSING: no file.
MISSING = b""
BINARY = bytes(range(256)) * 20


def stopping_corpora(tiny_corpus: Path) -> dict[str, tuple[Optional[bytes], Optional[bytes]]]:
    valid = (tiny_corpus / "valid.txt").read_text()
    return {
        "binary_validation": (None, BINARY),
        "utf16_validation": (None, valid.encode("utf-16")),
        "binary_train": (BINARY, None),
        "missing_validation": (None, MISSING),
        "blank_validation": (None, b"\n\n\n"),
    }


def corpus_folder(folder: Path, tiny_corpus: Path, train, valid) -> Path:
    """FOLDER/train/shard_0.txt and FOLDER/valid.txt: the given bytes, else the tiny corpus's."""
    (folder / "train").mkdir(parents=True)
    for path, content in ((Path("train/shard_0.txt"), train), (Path("valid.txt"), valid)):
        if content is None:
            shutil.copy(tiny_corpus / path, folder / path)
        elif content is not MISSING:
            (folder / path).write_bytes(content)
    return folder


def listing(folder: Path) -> Optional[list[str]]:
    return sorted(os.listdir(folder)) if folder.exists() else None


def output(result) -> str:
    return result.stdout + result.stderr


def one_line_error(runs, name: str) -> str:
    """The refused run `name`: exit status 1, its last line `allennlp elmo-continue: error: ...`
    -> that line."""
    result = runs["results"][name]
    error = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and error.startswith("allennlp elmo-continue: error: "), error
    return error


def options_of(folder: Path) -> dict:
    return json.loads(next(folder.glob("*options.json")).read_text())


@pytest.fixture(scope="module")
def runs(tiny_bilm_archive, tiny_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("elmo_continue_cli")
    exported = root / "exported"
    run_allennlp_in_process(["elmo-export", str(tiny_bilm_archive), str(exported)])
    published = published_folder(exported, root / "published", with_vocab=False)
    with_vocab = published_folder(exported, root / "with_vocab", with_vocab=True)
    two_options = published_folder(exported, root / "two_options", with_vocab=False)
    shutil.copy(exported / "options.json", two_options / "options.json")
    no_options = published_folder(exported, root / "no_options", with_vocab=False)
    (no_options / f"{PREFIX}options.json").unlink()
    wider = published_folder(exported, root / "wider", with_vocab=False)
    wider_options = options_of(wider)
    wider_options["lstm"]["dim"] *= 2
    (wider / f"{PREFIX}options.json").write_text(json.dumps(wider_options))
    source_char_cnn = read_bilm_encoder(
        str(published / f"{PREFIX}options.json"), str(published / f"{PREFIX}weights.hdf5")
    ).char_cnn.state_dict()

    one_epoch = json.dumps({"trainer.num_epochs": 1})
    jobs = {
        "counted": (published, root / "counted", tiny_corpus, "--freeze", "char_cnn"),
        "folder_vocab": (
            with_vocab,
            root / "folder_vocab",
            tiny_corpus,
            "-o",
            json.dumps({"trainer.num_epochs": 1, "trainer.optimizer.lr": 0.0}),
        ),
    }
    refusals = {  # no training: errors
        "two_options": (two_options, root / "bad1", tiny_corpus, "-o", one_epoch),
        "no_options": (no_options, root / "bad2", tiny_corpus, "-o", one_epoch),
        "mismatch": (
            published,
            root / "bad3",
            tiny_corpus,
            "-o",
            json.dumps({"trainer.num_epochs": 1, "model.contextualizer.cell_size": 64}),
        ),
        "misspelt": (published, root / "bad4", tiny_corpus, "-o", '{"trainer.num_epoch": 1}'),
        "unparsed": (published, root / "bad5", tiny_corpus, "-o", '{"trainer.num_epochs": 1'),
        # stopped inside allennlp's train, after it wrote config.json, meta.json and out.log
        "no_corpus": (published, root / "counted", root / "no_corpus", "-o", one_epoch),
        "wider": (wider, root / "bad6", tiny_corpus, "-o", one_epoch),
    }
    pair = (  # no training: the printed command of an explicit pair
        exported / "options.json",
        root / "pair",
        tiny_corpus,
        "--weights-file",
        str(exported / "weights.hdf5"),
        "--vocabulary",
        str(exported / "vocab.txt"),
        "--dry-run",
    )
    # the refusals first: "no_corpus" fails in the folder "counted" then trains in
    refused = {name: elmo_continue(*job, refused=True) for name, job in refusals.items()}
    # runs stopped by their data, each in a folder of its own (the first in the one
    # "folder_vocab" then trains in; "utf16_validation" in a folder the user made) -> what is left
    stopped_in = {name: root / f"stopped_{name}" for name in stopping_corpora(tiny_corpus)}
    stopped_in["binary_validation"] = root / "folder_vocab"
    stopped_in["utf16_validation"].mkdir()
    left = {}
    for name, (train, valid) in stopping_corpora(tiny_corpus).items():
        corpus = corpus_folder(root / "corpora" / name, tiny_corpus, train, valid)
        refused[name] = elmo_continue(with_vocab, stopped_in[name], corpus, refused=True)
        left[name] = listing(stopped_in[name])
    results = {
        **refused,
        "counted": elmo_continue(*jobs["counted"], "-o", one_epoch),
        # checked by the tests: the corrected command of "binary_validation"
        "folder_vocab": elmo_continue(*jobs["folder_vocab"], check=False),
        "pair": elmo_continue(*pair),
    }
    first_metrics = json.loads((root / "counted" / "metrics.json").read_text())
    # the same command again with -r: allennlp accepts it (same config) and resumes
    results["resumed"] = elmo_continue(*jobs["counted"], "-o", one_epoch, "-r")
    source_options = options_of(published)
    shutil.rmtree(published)
    archive = root / "counted" / "model.tar.gz"
    evaluated = evaluation(archive, tiny_corpus / "valid.txt", root / "evaluated.json")
    run_allennlp_in_process(["elmo-export", str(archive), str(root / "again")])
    return {
        "root": root,
        "results": results,
        "evaluated": evaluated,
        "source_options": source_options,
        "first_metrics": first_metrics,
        "source_char_cnn": source_char_cnn,
        "with_vocab": with_vocab,
        "left": left,
    }


def test_published_names_need_no_architecture_and_the_vocabulary_is_counted(runs):
    log = output(runs["results"]["counted"])
    assert "elmo-continue: vocabulary: counted from the training corpus" in log
    assert "the softmax starts fresh (random)" in log
    config = json.loads((runs["root"] / "counted" / "config.json").read_text())
    architecture = architecture_from_options(runs["source_options"])
    embedder = config["model"]["text_field_embedder"]["token_embedders"]["elmo"]
    char_cnn = {k: v for k, v in architecture["token_embedder"].items() if k != "type"}
    assert {key: embedder[key] for key in char_cnn} == char_cnn
    contextualizer = config["model"]["contextualizer"]
    assert {key: contextualizer[key] for key in architecture["contextualizer"]} == architecture[
        "contextualizer"
    ]
    assert config["vocabulary"] == {"type": "from_instances", "min_count": {"tokens": 2}}


def test_the_archive_evaluates_and_exports_the_source_architecture_without_the_source(runs):
    root = runs["root"]
    assert not (root / "published").exists()
    best = json.loads((root / "counted" / "metrics.json").read_text())["best_validation_perplexity"]
    assert runs["evaluated"]["perplexity"] == pytest.approx(best, rel=1e-5)
    exported = options_of(root / "again")
    for section in ("lstm", "char_cnn"):
        assert exported[section] == runs["source_options"][section]


def test_frozen_char_cnn_equals_the_source_and_the_lstm_trained(runs):
    model = load_archive(str(runs["root"] / "counted" / "model.tar.gz")).model
    continued = model.bilm_encoder().char_cnn.state_dict()
    for name, value in runs["source_char_cnn"].items():
        assert torch.equal(continued[name], value), name
    source = read_bilm_encoder(
        str(runs["root"] / "exported" / "options.json"),
        str(runs["root"] / "exported" / "weights.hdf5"),
    )
    lstm = model.bilm_encoder().contextualizer.state_dict()
    assert any(
        not torch.equal(lstm[name], value)
        for name, value in source.contextualizer.state_dict().items()
    )


def test_the_same_command_with_r_resumes(runs):
    log = output(runs["results"]["resumed"])
    assert "Recovering from prior training" in log
    resumed = json.loads((runs["root"] / "counted" / "metrics.json").read_text())
    # the state of the finished epoch is restored and no epoch is trained again
    assert "training_epochs" not in resumed and resumed["best_epoch"] == 0
    first = runs["first_metrics"]
    assert resumed["best_validation_perplexity"] == first["best_validation_perplexity"]


def test_the_folders_vocab_txt_is_the_vocabulary_and_its_softmax_is_imported(runs):
    log = output(runs["results"]["folder_vocab"])
    folder = runs["with_vocab"]
    assert f"elmo-continue: vocabulary: {folder / 'vocab.txt'} (the ELMo folder's)" in log
    assert "softmax starts fresh" not in log
    model = load_archive(str(runs["root"] / "folder_vocab" / "model.tar.gz")).model
    tokens = read_elmo_vocab_file(str(folder / "vocab.txt"))  # its <UNK> is allennlp's OOV
    assert model.softmax_tokens() == tokens
    weight, bias = read_softmax(str(folder / f"{PREFIX}softmax.hdf5"), len(tokens), 16)
    model_weight, model_bias = model.softmax_matrices()
    assert torch.equal(model_weight[: len(tokens)], torch.from_numpy(weight))  # lr 0
    assert torch.equal(model_bias[: len(tokens)], torch.from_numpy(bias))


@pytest.mark.parametrize(
    "name,found",
    [
        ("two_options", f"found 2: ['{PREFIX}options.json', 'options.json']"),
        ("no_options", "found 0: none"),
    ],
)
def test_an_ambiguous_folder_is_a_one_line_error_naming_it_and_its_files(runs, name, found):
    error = one_line_error(runs, name)
    assert str(runs["root"] / name) in error and found in error
    assert f"{PREFIX}weights.hdf5" in error  # the files in it
    assert not (runs["root"] / ("bad1" if name == "two_options" else "bad2")).exists()


def test_an_architecture_key_in_o_must_equal_the_options_file(runs):
    error = one_line_error(runs, "mismatch")
    assert "lstm.dim: config 64 vs options file 32" in error
    assert not (runs["root"] / "bad3").exists()


@pytest.mark.parametrize(
    "name,folder,message",
    [
        ("no_corpus", "counted", "elmo_corpus: no file matches"),
        ("wider", "bad6", "has shape (32, 128) but"),
    ],
)
def test_a_run_stopped_in_training_setup_leaves_no_folder_and_the_corrected_command_trains(
    runs, name, folder, message
):
    assert message in one_line_error(runs, name)
    run = runs["root"] / folder
    # "counted" is the corrected command's folder: it trained there after the refusal
    assert not run.exists() or (run / "model.tar.gz").is_file()


@pytest.mark.parametrize(
    "name,message",
    [
        ("binary_validation", "corpora/binary_validation/valid.txt is not text"),
        ("utf16_validation", "corpora/utf16_validation/valid.txt is not text"),
        ("binary_train", "corpora/binary_train/train/shard_0.txt is not text"),
        ("missing_validation", "no file matches '{root}/corpora/missing_validation/valid.txt'"),
        ("blank_validation", "no tokens at all in '{root}/corpora/blank_validation/valid.txt'"),
    ],
)
def test_a_run_stopped_by_its_data_leaves_its_folder_as_it_was(runs, name, message):
    """Whatever stops a new run before its first checkpoint (here: data found unreadable once
    the trainer and its TensorBoard folder exist, or before), what it wrote is removed: the
    folder it made is gone, the folder the user made is empty again; the corrected command then
    trains in it ("folder_vocab" is the folder "binary_validation" stopped in)."""
    result = runs["results"][name]
    assert "Traceback" not in result.stderr
    assert message.format(root=runs["root"]) in one_line_error(runs, name)
    assert runs["left"][name] == ([] if name == "utf16_validation" else None)
    corrected = runs["results"]["folder_vocab"]
    assert corrected.returncode == 0, output(corrected)[-3000:]


def test_a_stopped_run_removes_only_the_folders_it_made(runs):
    """`-s` through folders that did not exist: `new/../kept` is the user's `kept` (not empty:
    allennlp refuses it), kept as it was; of `made/a/b` the stopped run removes `made`."""
    root = runs["root"] / "spelled"
    (root / "kept").mkdir(parents=True)
    (root / "kept" / "notes.txt").write_text("keep")
    corpus = runs["root"] / "corpora" / "missing_validation"
    for out in (root / "new" / ".." / "kept", root / "made" / "a" / "b"):
        assert elmo_continue(runs["with_vocab"], out, corpus, refused=True).returncode == 1
    assert sorted(os.listdir(root)) == ["kept"] and os.listdir(root / "kept") == ["notes.txt"]


def test_a_trainer_key_allennlp_would_ignore_is_a_one_line_error(runs):
    assert one_line_error(runs, "misspelt") == (
        "allennlp elmo-continue: error: trainer.num_epoch is not a key of allennlp's trainer, "
        "which would ignore it; did you mean trainer.num_epochs?"
    )
    assert not (runs["root"] / "bad4").exists()


def test_an_override_that_does_not_parse_is_a_one_line_error(runs):
    assert "Traceback" not in runs["results"]["unparsed"].stderr
    error = one_line_error(runs, "unparsed")
    assert error.startswith("allennlp elmo-continue: error: -o does not parse: "), error
    assert not (runs["root"] / "bad5").exists()


def test_an_explicit_pair_dry_run_prints_the_allennlp_train_command(runs):
    result = runs["results"]["pair"]
    assert result.returncode == 0, output(result)
    words = shlex.split(result.stdout.strip().splitlines()[-1])
    assert words[:2] == ["allennlp", "train"] and words[words.index("-s") + 1] == str(
        runs["root"] / "pair"
    )
    overrides = json.loads(words[words.index("-o") + 1])
    exported = runs["root"] / "exported"
    assert overrides["model.pretrained_file"] == [
        str(exported / "options.json"),
        str(exported / "weights.hdf5"),
    ]
    assert overrides["vocabulary"] == {
        "type": "elmo_tokens_file",
        "tokens_file": str(exported / "vocab.txt"),
    }
    assert overrides["model.contextualizer.cell_size"] == 32
    assert not (runs["root"] / "pair").exists()  # nothing trained
