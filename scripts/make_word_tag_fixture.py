"""Builds fixtures/tagged/{train,valid}_word_tag.txt: the first sentences of the tagged CoNLL-U
fixture in allennlp's `sequence_tagging` format (`word###TAG` separated by spaces, one sentence
per line), small enough for end-to-end CLI tests. Deterministic.
Usage: python scripts/make_word_tag_fixture.py [FIXTURE_DIR]
"""

import sys
from collections.abc import Iterator
from pathlib import Path

SIZES = {"train": 120, "valid": 40}


def conllu_sentences(path: Path) -> Iterator[list[str]]:
    """`word###UPOS` items of each sentence (multiword-token ranges and empty nodes skipped)."""
    items: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if items:
                yield items
            items = []
        elif not line.startswith("#"):
            columns = line.split("\t")
            if columns[0].isdigit():
                items.append(f"{columns[1]}###{columns[3]}")
    if items:
        yield items


def main(fixture_dir: Path) -> None:
    for split, size in SIZES.items():
        sentences = list(conllu_sentences(fixture_dir / f"{split}.conllu"))[:size]
        out = fixture_dir / f"{split}_word_tag.txt"
        out.write_text("".join(" ".join(items) + "\n" for items in sentences), encoding="utf-8")
        print(f"{len(sentences)} sentences -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures/tagged"))
