"""Docstrings read in one breath: no sentence in elmo_plugin/ or benchmarks/ over 330 characters."""

import ast
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# blocks: split at a blank line, a list item, a heading; a parameter's "name : `type`" line alone
BLOCKS = re.compile(r"\n\s*\n|\n(?=\s*(?:- |# |\d+\. ))|\n(\s*\w+ : .*)\n?")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])")
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def test_no_docstring_sentence_in_the_package_or_the_benchmarks_is_over_330_characters():
    files = [*REPO_ROOT.glob("elmo_plugin/**/*.py"), *REPO_ROOT.glob("benchmarks/**/*.py")]
    long = [
        f"{path.relative_to(REPO_ROOT)}: {sentence[:60]}..."
        for path in sorted(files)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, DOCUMENTED)
        for block in BLOCKS.split(ast.get_docstring(node) or "")
        if block
        for sentence in SENTENCE_END.split(" ".join(block.split()))
        if len(sentence) > 330
    ]
    assert long == []
