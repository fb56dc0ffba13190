"""Builds fixtures/classification/{train,valid}.jsonl: labelled sentences for the classifier
example (training_config/classifier_elmo.jsonnet), one `{"text": ..., "label": ...}` per line,
as allennlp's `text_classification_json` reader takes them.

The sentences are those of fixtures/tagged (scripts/make_tagged_fixture.py), so the demo biLM
knows their words. The label is the sentence's form, read off its tokens and UPOS tags:
`conditional` (opens with "If" / "When"), `imperative` (opens with a verb), `negated` (has
"not"), else `declarative`. Deterministic. Usage:
python scripts/make_classification_fixture.py [OUT_DIR] [TAGGED_DIR]
"""

import json
import sys
from collections import Counter
from pathlib import Path


def sentences(conllu: Path) -> list[list[tuple[str, str]]]:
    """(word, UPOS) rows of each sentence of a CoNLL-U file."""
    found: list[list[tuple[str, str]]] = [[]]
    for line in conllu.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            found.append([])
        elif not line.startswith("#"):
            columns = line.split("\t")
            found[-1].append((columns[1], columns[3]))
    return [rows for rows in found if rows]


def sentence_form(rows: list[tuple[str, str]]) -> str:
    words = [word.lower() for word, _ in rows]
    if words[0] in ("if", "when"):
        return "conditional"
    if rows[0][1] == "VERB":
        return "imperative"
    return "negated" if "not" in words else "declarative"


def main(out_dir: Path, tagged_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid"):
        rows = sentences(tagged_dir / f"{split}.conllu")
        lines = [
            json.dumps(
                {"text": " ".join(word for word, _ in sentence), "label": sentence_form(sentence)}
            )
            for sentence in rows
        ]
        (out_dir / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        counts = Counter(sentence_form(sentence) for sentence in rows)
        print(f"{split}: {len(rows)} sentences, {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else root / "fixtures" / "classification",
        Path(sys.argv[2]) if len(sys.argv) > 2 else root / "fixtures" / "tagged",
    )
