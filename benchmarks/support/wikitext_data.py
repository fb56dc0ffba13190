"""The benchmarks' real data (relative to `shared_data_dir()`), and WikiText-2's one train /
validation split."""

from pathlib import Path

from benchmarks.support.common import shared_data_dir

WIKITEXT = Path("wikitext-2") / "valid.txt"
EWT = Path("ud-english-ewt") / "en_ewt-ud-dev.conllu"


def wikitext_file() -> Path:
    return shared_data_dir() / WIKITEXT


def split_train_valid(lines: list[str]) -> tuple[list[str], list[str]]:
    """First 90% of the lines for training, the last 10% for validation."""
    cut = len(lines) * 9 // 10
    return lines[:cut], lines[cut:]


def write_train_valid(source: Path, train: Path, valid: Path) -> str:
    """`split_train_valid` of `source`'s lines written to `train` and `valid`; returns which
    lines went where, in words."""
    train_lines, valid_lines = split_train_valid(source.read_text(encoding="utf-8").splitlines())
    train.write_text("\n".join(train_lines) + "\n", encoding="utf-8")
    valid.write_text("\n".join(valid_lines) + "\n", encoding="utf-8")
    cut, total = len(train_lines), len(train_lines) + len(valid_lines)
    return f"{source}: lines 1-{cut} train, lines {cut + 1}-{total} validation"
