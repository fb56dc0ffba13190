"""`allennlp predict --output-file` with the plugin imported, through the real CLI: the output
checked before the model loads (a folder, the input itself, a device), locked (a second run on it
refused, naming the process), and the input read as our commands read text, for our predictors
and allennlp's own `sentence_tagger` alike; `allennlp evaluate`'s `--output-file` with
`elmo_evaluator`."""

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest
import spacy

from tests.helpers import REPO_ROOT, conllu_head, one_error_line, run_allennlp

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
SENTENCE = b'{"sentence": "the file is open ."}\n'


@pytest.fixture
def root(plugin_cwd) -> Path:
    (plugin_cwd / "in.jsonl").write_bytes(SENTENCE)
    return plugin_cwd


def args_to(output: str) -> list[str]:
    """`allennlp predict` of in.jsonl into `output` (run in the test's folder)."""
    return [
        *("predict", str(BILM), "in.jsonl", "--predictor", "elmo_embeddings", "--silent"),
        *("--output-file", output),
    ]


def refused_before_loading(result) -> str:
    """`one_error_line`, the run refused before the model loads."""
    assert "loading archive" not in result.stdout + result.stderr
    return one_error_line(result)


@pytest.mark.parametrize(
    "output, named",
    [
        ("folder", "cannot write folder: it is a folder"),
        ("in.jsonl", "cannot write in.jsonl: it is the input file in.jsonl"),
        ("linked.jsonl", "cannot write linked.jsonl: it is the input file in.jsonl"),
        ("null.jsonl", "cannot write null.jsonl: it is a device, pipe or socket"),
    ],
    ids=["folder", "input", "hard-link-to-input", "link-to-a-device"],
)
def test_a_bad_output_file_is_one_line_before_the_model_loads(root, output, named):
    (root / "folder").mkdir()
    os.link(root / "in.jsonl", root / "linked.jsonl")
    os.symlink("/dev/null", root / "null.jsonl")
    line = refused_before_loading(run_allennlp(args_to(output), cwd=root, check=False))
    assert named in line, line
    assert (root / "in.jsonl").read_bytes() == SENTENCE


def test_a_second_predict_on_one_output_file_is_refused_naming_the_first(root):
    with open(root / "out.jsonl.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"{os.getpid()}\n")
        held.flush()
        line = refused_before_loading(run_allennlp(args_to("out.jsonl"), cwd=root, check=False))
    assert f"out.jsonl is being written by process {os.getpid()}" in line, line
    assert not (root / "out.jsonl").exists()


def test_invalid_utf8_in_a_predict_input_is_replaced_with_a_warning_naming_its_line(root):
    (root / "in.jsonl").write_bytes(SENTENCE + b'{"sentence": "caf\xe9 ."}\n')
    result = run_allennlp(args_to("out.jsonl"), cwd=root, check=False)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "allennlp predict: invalid UTF-8 at in.jsonl:2, replaced" in result.stderr
    assert len((root / "out.jsonl").read_text().splitlines()) == 2


def test_blank_predict_input_lines_are_skipped_and_counted(root):
    (root / "in.jsonl").write_bytes(SENTENCE + b"\n   \n" + SENTENCE)
    result = run_allennlp(args_to("out.jsonl"), cwd=root)
    assert "allennlp predict: 2 blank lines of in.jsonl skipped" in result.stderr
    assert len((root / "out.jsonl").read_text().splitlines()) == 2


def test_a_predict_input_that_is_not_text_is_one_line_naming_it(root):
    (root / "in.jsonl").write_bytes(bytes(range(256)) * 40)
    result = run_allennlp(args_to("out.jsonl"), cwd=root, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "Traceback" not in output, output[-3000:]
    assert "allennlp predict: error: in.jsonl is not text" in output
    assert sorted(os.listdir(root)) == [".allennlp_plugins", "in.jsonl"]


TAGGER = REPO_ROOT / "fixtures" / "archives_before_layering" / "tagger.tar.gz"
ELMO_EVALUATOR = '{"evaluation": {"type": "elmo_evaluator"}}'


def test_evaluate_refuses_an_output_file_that_is_its_data_and_writes_metrics_whole(root):
    (root / "data.conllu").write_text(
        conllu_head(REPO_ROOT / "fixtures/tagged/valid.conllu", 5), encoding="utf-8"
    )
    os.link(root / "data.conllu", root / "linked.json")
    data = (root / "data.conllu").read_bytes()
    evaluate = ["evaluate", str(TAGGER), "data.conllu", "-o", ELMO_EVALUATOR, "--output-file"]
    result = run_allennlp([*evaluate, "linked.json"], cwd=root, check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1, result.stderr[-3000:]
    assert "cannot write linked.json: it is the evaluation data file data.conllu" in last, last
    assert (root / "data.conllu").read_bytes() == data
    run_allennlp([*evaluate, "metrics.json"], cwd=root)
    assert "accuracy" in json.loads((root / "metrics.json").read_text())


def test_predict_refuses_its_weights_file_as_its_output_before_the_model_loads(root):
    (root / "w.th").write_bytes(b"weights")
    args = [*args_to("w.th"), "--weights-file", "w.th"]
    line = refused_before_loading(run_allennlp(args, cwd=root, check=False))
    assert "cannot write w.th: it is the weights file w.th" in line, line
    assert (root / "w.th").read_bytes() == b"weights"


@pytest.mark.parametrize(
    "options, named",
    [
        (["--output-file", "model.tar.gz"], "cannot write model.tar.gz: it is the model"),
        (
            ["--predictions-output-file", "data.conllu"],
            "it is the evaluation data file data.conllu, which writing it would destroy; choose "
            "another --predictions-output-file",
        ),
        (["--weights-file", "w.th", "--output-file", "w.th"], "it is the weights file w.th"),
        (
            ["--output-file", "same.json", "--predictions-output-file", "./same.json"],
            "cannot write ./same.json: it is also given to --output-file",
        ),
        (
            ["--predictions-output-file", "x", "--auto-names", "PREDS"],
            "cannot write data.preds: it is the evaluation data file data.preds",
        ),
    ],
    ids=["the-model", "the-data", "the-weights-file", "both-outputs", "auto-named-data"],
)
def test_evaluate_refuses_an_output_that_is_an_input_or_the_other_output_for_any_archive(
    root, options, named
):
    """The tagger archive as it is: allennlp's own evaluator, not `elmo_evaluator`."""
    shutil.copy(TAGGER, root / "model.tar.gz")
    (root / "w.th").write_bytes(b"weights")
    (root / "data.conllu").write_text(conllu_head(REPO_ROOT / "fixtures/tagged/valid.conllu", 5))
    data = (root / "data.conllu").read_bytes()
    if "--auto-names" in options:  # the name it gives data.preds's predictions: data.preds
        os.rename(root / "data.conllu", root / "data.preds")
    data_file = "data.preds" if "--auto-names" in options else "data.conllu"
    args = ["evaluate", "model.tar.gz", data_file, *options]
    result = run_allennlp(args, cwd=root, check=False)
    line = refused_before_loading(result)
    assert line.startswith("allennlp evaluate: error: ") and named in line, line
    assert (root / "model.tar.gz").read_bytes() == TAGGER.read_bytes()
    assert (root / "w.th").read_bytes() == b"weights" and not (root / "same.json").exists()
    assert (root / data_file).read_bytes() == data


def test_a_second_evaluate_on_one_output_file_is_refused_naming_the_first(root):
    (root / "data.conllu").write_text(conllu_head(REPO_ROOT / "fixtures/tagged/valid.conllu", 5))
    with open(root / "metrics.json.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"{os.getpid()}\n")
        held.flush()
        args = ["evaluate", str(TAGGER), "data.conllu", "--output-file", "metrics.json"]
        # a fresh process, as a user's: allennlp imports the plugin after it parsed the command
        line = refused_before_loading(run_allennlp(args, cwd=root, check=False, fresh=True))
    assert f"metrics.json is being written by process {os.getpid()}" in line, line
    assert not (root / "metrics.json").exists()


@pytest.fixture(scope="module")
def blank_english(tmp_path_factory) -> Path:
    """A saved spaCy pipeline of English's tokenizer alone: allennlp's `sentence_tagger` takes its
    path as `language` (no spaCy model is installed, and allennlp would download one)."""
    folder = tmp_path_factory.mktemp("spacy") / "blank_en"
    spacy.blank("en").to_disk(folder)
    return folder


def sentence_tagger_to(output: str, language: Path) -> list[str]:
    """`allennlp predict` of in.jsonl into `output` with allennlp's own `sentence_tagger`, a
    predictor that is not ours, over the tagger fixture."""
    return [
        *("predict", str(TAGGER), "in.jsonl", "--predictor", "sentence_tagger", "--silent"),
        *("--predictor-args", json.dumps({"language": str(language)}), "--output-file", output),
    ]


def test_allennlps_own_predictor_writes_whole_over_a_link_and_reads_bad_utf8_by_line(
    root, blank_english
):
    (root / "in.jsonl").write_bytes(SENTENCE + b'{"sentence": "caf\xe9 ."}\n')
    (root / "target.txt").write_text("kept\n")
    os.symlink("target.txt", root / "out.jsonl")
    result = run_allennlp(sentence_tagger_to("out.jsonl", blank_english), cwd=root, check=False)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "allennlp predict: invalid UTF-8 at in.jsonl:2, replaced" in result.stderr
    assert (root / "target.txt").read_text() == "kept\n"
    assert not (root / "out.jsonl").is_symlink()
    tagged = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]
    assert [len(line["tags"]) for line in tagged] == [len(line["words"]) for line in tagged]
    assert tagged[0]["words"] == ["the", "file", "is", "open", "."] and len(tagged) == 2
    assert sorted(os.listdir(root)) == [".allennlp_plugins", "in.jsonl", "out.jsonl", "target.txt"]


@pytest.mark.parametrize(
    "output, named",
    [
        ("in.jsonl", "cannot write in.jsonl: it is the input file in.jsonl"),
        ("out.jsonl", "out.jsonl is being written by process {pid} (it holds out.jsonl.lock)"),
    ],
    ids=["the-input", "locked"],
)
def test_allennlps_own_predictor_refuses_its_input_or_a_locked_output_before_the_model_loads(
    root, blank_english, output, named
):
    """(out.jsonl's lock is held by this test throughout.)"""
    with open(root / "out.jsonl.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"{os.getpid()}\n")
        held.flush()
        result = run_allennlp(sentence_tagger_to(output, blank_english), cwd=root, check=False)
    line = refused_before_loading(result)
    assert named.format(pid=os.getpid()) in line, line
    assert (root / "in.jsonl").read_bytes() == SENTENCE
    assert not (root / "out.jsonl").exists()
