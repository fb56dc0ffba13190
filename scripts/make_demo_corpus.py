"""Builds fixtures/demo_corpus/ from the docstrings of Python's standard library.

Text that ships with every Python, so the demo needs no download and copies no corpus.
Output: one tokenized sentence per line (punctuation split off), in train/valid shards.
Deterministic for a given Python version. Usage: python scripts/make_demo_corpus.py [OUT_DIR]
"""

import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path

MODULES = sorted(
    name
    for name in sys.stdlib_module_names
    if not name.startswith("_")
    and name not in {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"}
)
TOKEN = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+|[.,;:!?()]")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
MIN_TOKENS, MAX_TOKENS = 4, 60


def docstrings():
    """Module, class and function docstrings of the standard library, in a fixed order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in MODULES:
            try:
                module = importlib.import_module(name)
            except Exception:
                continue
            yield inspect.getdoc(module) or ""
            for _, member in sorted(vars(module).items()):
                if (
                    inspect.isclass(member) or inspect.isfunction(member)
                ) and member.__module__ == name:
                    yield inspect.getdoc(member) or ""


def sentences():
    seen = set()
    for doc in docstrings():
        for paragraph in doc.split("\n\n"):
            if paragraph.lstrip().startswith((">>>", "-", "*", "|")):
                continue
            for sentence in SENTENCE_END.split(" ".join(paragraph.split())):
                tokens = TOKEN.findall(sentence)
                line = " ".join(tokens)
                if MIN_TOKENS <= len(tokens) <= MAX_TOKENS and line not in seen:
                    seen.add(line)
                    yield line


def main(out_dir: Path) -> None:
    lines = list(sentences())
    split = len(lines) * 9 // 10
    shards = {"train": [lines[:split][i::3] for i in range(3)], "valid": [lines[split:]]}
    for part, parts in shards.items():
        (out_dir / part).mkdir(parents=True, exist_ok=True)
        for index, shard in enumerate(parts):
            (out_dir / part / f"shard_{index}.txt").write_text("\n".join(shard) + "\n")
    print(f"{len(lines)} sentences, {sum(len(line.split()) for line in lines)} tokens -> {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures/demo_corpus"))
