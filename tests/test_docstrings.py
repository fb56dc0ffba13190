"""Docstrings read in one breath: no sentence in elmo_plugin/ or benchmarks/ over 330 characters."""

import ast
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

LONGEST_SENTENCE = 330
# a new block: a blank line, a list item, a heading, a `# Parameters` entry's "name : `type`"
BLOCK_START = re.compile(r"\s*$|\s*(- |# |\d+\. |\w+ : )")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])")


def sentences(docstring: str) -> list[str]:
    """The sentences of a docstring; a parameter's "name : `type`" line stands alone."""
    blocks: list[list[str]] = [[]]
    for line in docstring.splitlines():
        if BLOCK_START.match(line) or re.match(r"\s*\w+ : ", "".join(blocks[-1][-1:])):
            blocks.append([])
        blocks[-1].append(line)
    return [
        part for block in blocks for part in SENTENCE_END.split(" ".join(" ".join(block).split()))
    ]


def test_no_docstring_sentence_in_the_package_or_the_benchmarks_is_over_330_characters():
    long = []
    for path in sorted(
        [*REPO_ROOT.glob("elmo_plugin/**/*.py"), *REPO_ROOT.glob("benchmarks/**/*.py")]
    ):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for sentence in sentences(ast.get_docstring(node) or ""):
                    if len(sentence) > LONGEST_SENTENCE:
                        long.append(f"{path.relative_to(REPO_ROOT)}: {sentence[:60]}...")
    assert long == []
