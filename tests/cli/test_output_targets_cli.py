"""What an output may be, through the real `allennlp` CLI: never the command's own redirected
standard output, never a file another run left at a lock's name, a link at the output replaced
(its target unchanged), a path that cannot be reached one line; `allennlp evaluate`'s
`--predictions-output-file` as its `--output-file`: refused when it is the data, written whole."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import (
    REPO_ROOT,
    allennlp_process,
    conllu_head,
    one_error_line,
    run_allennlp,
    start_forked,
)

LINE = "the file is open .\n"
TAGGER = REPO_ROOT / "fixtures" / "archives_before_layering" / "tagger.tar.gz"
ELMO_EVALUATOR = '{"evaluation": {"type": "elmo_evaluator"}}'


@pytest.fixture
def root(plugin_cwd) -> Path:
    (plugin_cwd / "in.txt").write_text(LINE * 3)
    return plugin_cwd


def test_dev_stdout_redirected_to_a_log_is_refused_and_the_log_kept(root):
    """`allennlp elmo-vocab in.txt /dev/stdout >> run.log`: the finished file would have
    replaced run.log, what it held before lost."""
    log = root / "run.log"
    log.write_text("an earlier line\n")
    command, env = allennlp_process(["elmo-vocab", "in.txt", "/dev/stdout"])
    with open(log, "a") as appended:
        process = start_forked(command, root, env, stdout=appended, stderr=subprocess.PIPE)
        _, stderr = process.communicate(timeout=600)
    text = stderr.decode()
    assert process.returncode == 1 and "Traceback" not in text, text[-3000:]
    assert "cannot write /dev/stdout: it is a process's open file" in text, text[-3000:]
    assert log.read_text().startswith("an earlier line\n")


@pytest.mark.parametrize("content", ["", "4242\n"], ids=["empty", "a-pid-file"])
def test_a_finished_file_at_the_lock_name_is_refused_and_kept(root, content):
    """Another run's output (or a pid file) at `tokens.txt.lock` is no lock to take over."""
    (root / "tokens.txt.lock").write_text(content)
    line = one_error_line(
        run_allennlp(["elmo-vocab", "in.txt", "tokens.txt"], cwd=root, check=False)
    )
    assert "tokens.txt.lock is not a lock of this package" in line, line
    assert (root / "tokens.txt.lock").read_text() == content
    assert not (root / "tokens.txt").exists()


def test_a_link_at_the_output_is_replaced_and_its_target_never_written(root):
    (root / "outside.txt").write_text("not the vocabulary\n")
    os.symlink(root / "outside.txt", root / "tokens.txt")
    run_allennlp(["elmo-vocab", "in.txt", "tokens.txt"], cwd=root)
    assert (root / "outside.txt").read_text() == "not the vocabulary\n"
    assert not (root / "tokens.txt").is_symlink() and "open" in (root / "tokens.txt").read_text()


@pytest.mark.parametrize(
    "output, named",
    [("in.txt/tokens.txt", "Not a directory"), ("loop/tokens.txt", "Too many levels")],
    ids=["under-a-file", "under-a-link-loop"],
)
def test_an_output_under_a_path_that_is_no_folder_is_one_line(root, output, named):
    os.symlink(root / "loop", root / "loop")
    line = one_error_line(run_allennlp(["elmo-vocab", "in.txt", output], cwd=root, check=False))
    assert f"cannot write {output}: " in line and named in line, line


def evaluate_args(*output: str) -> list[str]:
    return ["evaluate", str(TAGGER), "data.conllu", "-o", ELMO_EVALUATOR, *output]


def test_evaluate_refuses_predictions_into_its_data_and_writes_them_whole(root):
    (root / "data.conllu").write_text(
        conllu_head(REPO_ROOT / "fixtures/tagged/valid.conllu", 5), encoding="utf-8"
    )
    data = (root / "data.conllu").read_bytes()
    os.link(root / "data.conllu", root / "linked.jsonl")
    args = evaluate_args("--predictions-output-file", "linked.jsonl")
    refused = run_allennlp(args, cwd=root, check=False, fresh=True)
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "cannot write linked.jsonl: it is the evaluation data file data.conllu" in last, last
    assert "--predictions-output-file" in last
    assert (root / "data.conllu").read_bytes() == data
    run_allennlp(evaluate_args("--predictions-output-file", "predictions.jsonl"), cwd=root)
    batches = [json.loads(line) for line in (root / "predictions.jsonl").read_text().splitlines()]
    assert batches and all("tags" in batch for batch in batches)
    assert sorted(path.name for path in root.iterdir() if path.name.startswith(".")) == [
        ".allennlp_plugins"
    ]
