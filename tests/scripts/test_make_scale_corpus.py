"""scripts/make_scale_corpus.py, run as the real CLI: shards, tokens.txt, statistics, refusals."""

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from allennlp.common import Params
from allennlp.data import Vocabulary

from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "make_scale_corpus.py"
NUM_TYPES = 793_471  # 1B Word's tokens.txt / ELMo's n_tokens_vocab
TOKENS, SHARDS = 20_000, 3
SHARD_NAMES = [f"shard-{i:05d}-of-{SHARDS:05d}.txt" for i in range(SHARDS)]


def make_corpus(
    out: Path, tokens: int = TOKENS, shards: int = SHARDS, seed: int = 0
) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        str(SCRIPT),
        "--tokens",
        str(tokens),
        "--shards",
        str(shards),
        "--out",
        str(out),
        "--seed",
        str(seed),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def generated(out: Path, **kwargs) -> Path:
    result = make_corpus(out, **kwargs)
    assert result.returncode == 0, result.stderr
    return out


def text_of(folder: Path) -> bytes:
    return b"".join((folder / name).read_bytes() for name in sorted(os.listdir(folder)))


def sentences(folder: Path) -> list[list[str]]:
    return [line.split() for line in text_of(folder).decode("utf-8").split("\n")[:-1]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return generated(tmp_path_factory.mktemp("scale") / "shards")


@pytest.fixture(scope="module")
def tokens_file(corpus) -> list[str]:
    return (corpus.parent / "tokens.txt").read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def large_corpus(tmp_path_factory) -> Path:
    """200k tokens, seed 1, one shard: enough sentences for the length tail and Zipf counts."""
    return generated(
        tmp_path_factory.mktemp("scale_large") / "shards", tokens=200_000, shards=1, seed=1
    )


def test_exactly_k_shards_and_nothing_else(corpus):
    assert sorted(os.listdir(corpus)) == SHARD_NAMES
    assert sorted(os.listdir(corpus.parent)) == [
        "shards",
        "tokens.txt",
    ]  # no temporary shard left behind
    assert all((corpus / name).stat().st_size > 0 for name in SHARD_NAMES)


def test_exactly_n_tokens_one_sentence_per_line(corpus):
    lines = sentences(corpus)
    assert sum(map(len, lines)) == TOKENS
    assert all(lines)  # no blank line
    for name in SHARD_NAMES:
        assert (corpus / name).read_bytes().endswith(b"\n")


def test_tokens_file_beside_the_folder(tokens_file):
    assert len(tokens_file) == NUM_TYPES
    assert tokens_file[:3] == ["<S>", "</S>", "<UNK>"]
    assert len(set(tokens_file)) == NUM_TYPES
    assert not re.search(r"\s", "\0".join(tokens_file))  # Unicode whitespace included
    assert all(tokens_file)
    assert tokens_file[3:6] == ["the", ",", "."]


def test_types_look_like_1b_word(tokens_file):
    words = tokens_file[3:]
    lengths = [len(word) for word in words]
    assert 8.0 <= sum(lengths) / len(lengths) <= 9.5
    assert sum(lengths[:1000]) / 1000 < sum(lengths[-1000:]) / 1000  # frequent types shorter
    assert max(lengths) > 25
    assert sum(not word.isascii() for word in words) > 10_000
    assert any(re.search("[\u0430-\u044f]", word) for word in words)  # Cyrillic
    assert any(re.search("[\u4e00-\u9fff]", word) for word in words)  # CJK
    assert any(re.search("[éüñç]", word) for word in words)
    assert any(word.isdigit() for word in words)


def test_tokens_file_loads_as_elmo_vocabulary(corpus):
    params = Params({"type": "elmo_tokens_file", "tokens_file": str(corpus.parent / "tokens.txt")})
    vocab = Vocabulary.from_params(params)
    # padding + one entry per line: 793,471 softmax rows, as elmo-export counts them
    assert vocab.get_vocab_size("tokens") == NUM_TYPES + 1
    indices = [vocab.get_token_index(token) for token in ["<S>", "</S>", "@@UNKNOWN@@", "the"]]
    assert indices == [1, 2, 3, 4]
    assert vocab.get_token_index("never-generated-token") == 3


def test_deterministic_by_seed(corpus, large_corpus, tmp_path):
    (tmp_path / "again").mkdir()  # an existing empty folder is fine
    again = generated(tmp_path / "again")
    assert sorted(os.listdir(again)) == SHARD_NAMES
    for name in SHARD_NAMES:
        assert (again / name).read_bytes() == (corpus / name).read_bytes()
    assert (tmp_path / "tokens.txt").read_bytes() == (corpus.parent / "tokens.txt").read_bytes()
    # The text does not depend on N or K beyond where it is cut, so only the seed makes these
    # differ.
    assert text_of(large_corpus)[:2000] != text_of(corpus)[:2000]
    # the type list is fixed, whatever the seed
    assert (large_corpus.parent / "tokens.txt").read_bytes() == (
        corpus.parent / "tokens.txt"
    ).read_bytes()


def test_sentence_lengths_like_1b_word(large_corpus):
    lengths = [len(line) for line in sentences(large_corpus)]
    assert sum(lengths) == 200_000
    assert 24 <= sum(lengths) / len(lengths) <= 30
    assert sum(length > 100 for length in lengths) >= 5
    assert min(lengths) >= 1 and sum(length <= 3 for length in lengths) > 0


def test_zipfian_frequencies(large_corpus, tokens_file):
    counts = Counter(token for line in sentences(large_corpus) for token in line)
    ranked = counts.most_common()
    assert ranked[0][0] == tokens_file[3]  # the most frequent word heads tokens.txt
    assert ranked[0][1] > 50 * ranked[999][1]
    assert set(counts) <= set(tokens_file[3:])  # every token is in the vocabulary, no specials
    assert any(not token.isascii() for token in counts)


@pytest.mark.parametrize(
    "args, problem",
    [(["--shards", "0"], "--shards"), (["--tokens", "0"], "--tokens"), ([], "not empty")],
)
def test_refusals(tmp_path, args, problem):
    out = tmp_path / "out"
    out.mkdir()
    (out / "existing.txt").write_text("x\n")
    if args:  # the bad number is refused even for an empty folder
        (out / "existing.txt").unlink()
    command = [
        sys.executable,
        str(SCRIPT),
        "--shards",
        "3",
        "--tokens",
        "100",
        "--out",
        str(out),
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and problem in result.stderr
    assert not (tmp_path / "tokens.txt").exists()


def test_elmo_corpus_reader_reads_the_shards(corpus):
    instances = list(ElmoCorpusReader().read(str(corpus / "shard-*.txt")))
    assert len(instances) == len(sentences(corpus))
    tokens = [token.text for token in instances[0]["source"].tokens]
    assert tokens[0] == "<S>" and tokens[-1] == "</S>"
    assert sum(len(instance["source"].tokens) - 2 for instance in instances) == TOKENS
