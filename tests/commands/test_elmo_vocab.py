"""`allennlp elmo-vocab` through the CLI (in this process; its errors in a process of their own),
from a working directory outside the repo."""

import bz2
import gzip
import json
import lzma
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import Vocabulary

from elmo_plugin.commands.elmo_vocab import count_tokens, vocab_tokens, write_elmo_vocab
from tests.helpers import run_allennlp, run_allennlp_in_process, run_forked

SPECIALS = ["<S>", "</S>", "@@UNKNOWN@@"]


def failing_allennlp(args, cwd) -> str:
    """Runs the CLI (a process of its own) expecting an error; returns its stderr."""
    result = run_allennlp(args, cwd=cwd, check=False)
    assert result.returncode != 0, result.stdout
    return result.stderr


@pytest.fixture
def corpus(plugin_cwd):
    (plugin_cwd / "first.txt").write_text("b a b\n\nc a <S> b d\n= Heading =\n", encoding="utf-8")
    (plugin_cwd / "shards").mkdir()
    (plugin_cwd / "shards" / "0.txt").write_text("d e c\n", encoding="utf-8")
    (plugin_cwd / "shards" / "1.txt").write_text("", encoding="utf-8")  # empty shard: skipped
    return plugin_cwd


def test_specials_first_then_by_count_ties_by_first_appearance(corpus):
    (corpus / "vocab").mkdir()
    out = corpus / "vocab" / "tokens.txt"
    write_elmo_vocab([str(corpus / "first.txt"), str(corpus / "shards" / "*.txt")], str(out))
    # counts: b 3, a 2, c 2, d 2, = 2, Heading 1, e 1; ties in order of first appearance.
    tokens = out.read_text(encoding="utf-8").splitlines()
    assert tokens == [*SPECIALS, "b", "a", "c", "d", "=", "Heading", "e"]
    vocab = Vocabulary.from_params(Params({"type": "elmo_tokens_file", "tokens_file": str(out)}))
    assert [vocab.get_token_index(t) for t in [*SPECIALS, "b", "e"]] == [1, 2, 3, 4, 10]
    assert vocab.get_token_index("never-seen") == 3
    assert vocab.get_vocab_size() == 11


def test_cli_min_count_max_size_and_heading_skipping(corpus):
    """Through `allennlp elmo-vocab` (the ordering test above calls the same function directly)."""
    out = corpus / "tokens.txt"
    args = ["elmo-vocab", "first.txt", "shards/*.txt", str(out), "--min-count", "2"]
    run_allennlp_in_process([*args, "--max-size", "6", "--skip-headings"], cwd=corpus)
    assert out.read_text(encoding="utf-8").splitlines() == [*SPECIALS, "b", "a", "c"]


def test_a_file_matched_by_two_patterns_counts_once(corpus):
    counts, counted = count_tokens([str(corpus / "first.txt"), str(corpus / "*.txt")])
    assert counted == 11  # first.txt's tokens, `<S>` included, read once
    assert counts["b"] == 3 and list(counts)[:3] == ["b", "a", "c"]
    assert vocab_tokens(counts, min_count=3) == [*SPECIALS, "b"]
    with pytest.raises(ConfigurationError, match="max-size"):
        vocab_tokens(counts, max_size=2)


@pytest.mark.parametrize("limits", [{"min_count": 0}, {"max_size": 2}])
def test_bad_limits_are_refused_before_the_corpus_is_read(tmp_path, limits):
    """(A corpus of billions of tokens takes hours to count.)"""
    with pytest.raises(ConfigurationError, match="--min-count|--max-size"):
        write_elmo_vocab([str(tmp_path / "missing" / "*.txt")], str(tmp_path / "v.txt"), **limits)


def test_bad_input_errors_name_the_pattern(corpus):
    assert "no file matches 'missing/*.txt'" in failing_allennlp(
        ["elmo-vocab", "first.txt", "missing/*.txt", "out.txt"], corpus
    )
    assert not (corpus / "out.txt").exists()
    (corpus / "blank.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="no tokens at all in '.*blank.txt', '.*1.txt'"):
        count_tokens([str(corpus / "blank.txt"), str(corpus / "shards" / "1.txt")])


def write_shards_with_ties(folder) -> None:
    """Seven shards (plain, .gz, .bz2, .xz) whose token counts tie across shards, and whose
    per-shard first-appearance orders differ from the corpus's: only a merge in path order
    ranks the ties right."""
    folder.mkdir()
    shards = [
        "a b\n\n= Heading =\n",
        "c b a d\n",
        "d c e\n",
        "e f é\n",
        "",
        "f g 中 é\n" * 3,
        "g 中 a b c d e\n",
    ]
    writers: list[Callable[..., IO[str]]] = [open, gzip.open, bz2.open, lzma.open]
    suffixes = ["", ".gz", ".bz2", ".xz"]
    for number, text in enumerate(shards):
        path = folder / f"shard-{number}.txt{suffixes[number % 4]}"
        with writers[number % 4](path, "wt", encoding="utf-8") as shard:
            shard.write(text)


def counted_in_a_command(folder: Path, workers: int, skip_headings: bool = False) -> dict:
    """`count_tokens([FOLDER/*], skip_headings, workers)` in a process of its own, a fork of the
    tests' warm server (`python -m tests.commands.test_elmo_vocab`, below): its pool's workers are
    forks of it, not freshly spawned interpreters (seconds each) -> {"counts": its counts'
    items, "counted": its token count}, or {"error": the message} of a ConfigurationError."""
    command = ["-m", "tests.commands.test_elmo_vocab", str(folder / "*"), str(workers)]
    command += ["--skip-headings"] if skip_headings else []
    result = run_forked(command, folder, dict(os.environ, OMP_NUM_THREADS="1"), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_workers_count_compressed_shards_with_ties_exactly_as_one_process(plugin_cwd):
    """workers=2 in this process: the pool's workers are spawned interpreters (the suite's one
    run of `elmo-vocab --workers`' real spawn; everywhere else they are forks of a forked
    command); workers=3 in a forked command (`counted_in_a_command`)."""
    write_shards_with_ties(plugin_cwd / "shards")
    pattern = str(plugin_cwd / "shards" / "*")
    one, counted = count_tokens([pattern], skip_headings=True)
    # a 3, b 3, c 3, d 3, e 3, f 4, g 4, é 4, 中 4: ties in corpus order, not shard 1's `c b a d`
    assert list(one.items()) == [
        ("a", 3),
        ("b", 3),
        ("c", 3),
        ("d", 3),
        ("e", 3),
        ("f", 4),
        ("é", 4),
        ("g", 4),
        ("中", 4),
    ]
    assert counted == 31
    spawned, spawned_counted = count_tokens([pattern], skip_headings=True, workers=2)
    assert list(spawned.items()) == list(one.items()) and spawned_counted == counted
    # 3 does not divide the 7 shards: workers take several each
    forked = counted_in_a_command(plugin_cwd / "shards", workers=3, skip_headings=True)
    assert forked == {"counts": [list(item) for item in one.items()], "counted": counted}
    assert vocab_tokens(one)[3:] == ["f", "é", "g", "中", "a", "b", "c", "d", "e"]


def test_a_shard_refused_in_a_worker_process_is_the_same_error_naming_it(plugin_cwd):
    """In a forked command (`counted_in_a_command`): its pool's workers are forks, the error
    crosses back from one as it does from a spawned one (pickled)."""
    write_shards_with_ties(plugin_cwd / "shards")
    (plugin_cwd / "shards" / "shard-9.txt").write_bytes(b"\0\xff\xfe\n" * 30)
    with pytest.raises(ConfigurationError, match="shard-9.txt is not text") as one_process:
        count_tokens([str(plugin_cwd / "shards" / "*")])
    refused = counted_in_a_command(plugin_cwd / "shards", workers=2)
    assert refused == {"error": str(one_process.value)}


def test_cli_workers_2_writes_the_same_bytes_as_workers_1_and_prints_tokens_per_second(plugin_cwd):
    write_shards_with_ties(plugin_cwd / "shards")
    printed = {}
    for workers in ("1", "2"):  # a process of its own: its pool's workers are its forks
        result = run_allennlp(
            [
                "elmo-vocab",
                "shards/*",
                f"tokens-{workers}.txt",
                "--skip-headings",
                "--workers",
                workers,
            ],
            cwd=plugin_cwd,
        )
        printed[workers] = result.stdout.strip().splitlines()[-1]
    assert (plugin_cwd / "tokens-2.txt").read_bytes() == (plugin_cwd / "tokens-1.txt").read_bytes()
    assert (plugin_cwd / "tokens-1.txt").read_text(encoding="utf-8").splitlines()[3:] == [
        "f",
        "é",
        "g",
        "中",
        "a",
        "b",
        "c",
        "d",
        "e",
    ]
    for workers, line in printed.items():
        assert (
            "counted 31 tokens in" in line and "tokens/s" in line and f"{workers} workers" in line
        )


def test_cli_workers_below_one_is_a_one_line_error(corpus):
    stderr = failing_allennlp(["elmo-vocab", "first.txt", "out.txt", "--workers", "0"], corpus)
    assert "Traceback" not in stderr
    assert (
        stderr.strip().splitlines()[-1]
        == "allennlp elmo-vocab: error: --workers must be at least 1, not 0"
    )
    assert not (corpus / "out.txt").exists()


if __name__ == "__main__":  # `counted_in_a_command`'s command: PATTERN WORKERS [--skip-headings]
    try:
        counts, total = count_tokens(
            [sys.argv[1]], skip_headings="--skip-headings" in sys.argv, workers=int(sys.argv[2])
        )
        print(json.dumps({"counts": list(counts.items()), "counted": total}))
    except ConfigurationError as error:  # any other error: the command fails
        print(json.dumps({"error": str(error)}))
