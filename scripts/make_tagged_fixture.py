"""Builds fixtures/tagged/{train,valid}.conllu: labelled CoNLL-U for the downstream demo.

A small template grammar over words of fixtures/demo_corpus (words the corpus lacks are left
out), so the demo biLM knows the vocabulary. UPOS tags, heads and relations are correct by
construction. Several words are NOUN in one template and VERB in another ("the copy" / "can
copy the file"), and "this" is DET or PRON, so context matters for tagging.
Deterministic. Usage: python scripts/make_tagged_fixture.py [OUT_DIR] [CORPUS_DIR]
"""

import random
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

SEED = 13
SIZES = {"train": 400, "valid": 100}

AMBIGUOUS = (
    "return read write open copy set match call check count parse run start end print test".split()
)
WORDS: dict[str, tuple[str, list[str]]] = {
    # category: (UPOS, words)
    "det": ("DET", "the a this each any some".split()),
    "noun": (
        "NOUN",
        "file object string name function module value line list path method type code number "
        "command directory tuple encoding instance text format source output input error mode key "
        "server socket message frame stream flag node result variable buffer thread request header "
        "pattern handler cache".split()
        + AMBIGUOUS,
    ),
    "verb3": (
        "VERB",
        "returns contains provides calls matches reads writes creates opens checks parses sets "
        "gets".split(),
    ),
    "verb": ("VERB", AMBIGUOUS + "create get close make use raise compile".split()),
    "participle": (
        "VERB",
        "returned called passed defined created used raised specified found added wrapped "
        "encoded".split(),
    ),
    "modal": ("AUX", "can will should must may".split()),
    "is": ("AUX", ["is"]),
    "adj": (
        "ADJ",
        "new empty current single optional abstract binary temporary regular simple standard "
        "special relative long common specific different".split(),
    ),
    "adp": ("ADP", "in of from with by for into on at over through".split()),
    "pron": ("PRON", "it this they you".split()),
    "cconj": ("CCONJ", "and or".split()),
    "not": ("PART", ["not"]),
    "to": ("PART", ["to"]),
    "sconj": ("SCONJ", "if when".split()),
    "punct": ("PUNCT", ["."]),
    "comma": ("PUNCT", [","]),
}

# Slot: (key, category, head key or None for the root, deprel, optional)
Slot = tuple[str, str, Optional[str], str, bool]
TEMPLATES: list[list[Slot]] = [
    # the new file contains a string .
    [
        ("d1", "det", "n1", "det", False),
        ("a1", "adj", "n1", "amod", True),
        ("n1", "noun", "v", "nsubj", False),
        ("v", "verb3", None, "root", False),
        ("d2", "det", "n2", "det", False),
        ("a2", "adj", "n2", "amod", True),
        ("n2", "noun", "v", "obj", False),
        ("p", "punct", "v", "punct", False),
    ],
    # the module can read the line from a file .
    [
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "v", "nsubj", False),
        ("m", "modal", "v", "aux", False),
        ("v", "verb", None, "root", False),
        ("d2", "det", "n2", "det", False),
        ("a2", "adj", "n2", "amod", True),
        ("n2", "noun", "v", "obj", False),
        ("ad", "adp", "n3", "case", False),
        ("d3", "det", "n3", "det", False),
        ("n3", "noun", "v", "obl", False),
        ("p", "punct", "v", "punct", False),
    ],
    # return the value of the key .
    [
        ("v", "verb", None, "root", False),
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "v", "obj", False),
        ("ad", "adp", "n2", "case", False),
        ("d2", "det", "n2", "det", False),
        ("n2", "noun", "n1", "nmod", False),
        ("p", "punct", "v", "punct", False),
    ],
    # if the list is empty , it can return a copy .
    [
        ("sc", "sconj", "a1", "mark", False),
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "a1", "nsubj", False),
        ("is", "is", "a1", "cop", False),
        ("a1", "adj", "v", "advcl", False),
        ("c", "comma", "a1", "punct", False),
        ("pr", "pron", "v", "nsubj", False),
        ("m", "modal", "v", "aux", False),
        ("v", "verb", None, "root", False),
        ("d2", "det", "n2", "det", False),
        ("n2", "noun", "v", "obj", False),
        ("p", "punct", "v", "punct", False),
    ],
    # the handler is called by the server .
    [
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "v", "nsubj:pass", False),
        ("is", "is", "v", "aux:pass", False),
        ("v", "participle", None, "root", False),
        ("ad", "adp", "n2", "case", False),
        ("d2", "det", "n2", "det", False),
        ("n2", "noun", "v", "obl", False),
        ("p", "punct", "v", "punct", False),
    ],
    # this returns the value and the key .
    [
        ("pr", "pron", "v", "nsubj", False),
        ("v", "verb3", None, "root", False),
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "v", "obj", False),
        ("cc", "cconj", "n2", "cc", False),
        ("d2", "det", "n2", "det", False),
        ("n2", "noun", "n1", "conj", False),
        ("p", "punct", "v", "punct", False),
    ],
    # the buffer is not empty .
    [
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "a", "nsubj", False),
        ("is", "is", "a", "cop", False),
        ("not", "not", "a", "advmod", False),
        ("a", "adj", None, "root", False),
        ("p", "punct", "a", "punct", False),
    ],
    # you should not open the file .
    [
        ("pr", "pron", "v", "nsubj", False),
        ("m", "modal", "v", "aux", False),
        ("not", "not", "v", "advmod", False),
        ("v", "verb", None, "root", False),
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "v", "obj", False),
        ("p", "punct", "v", "punct", False),
    ],
    # use the method to read the line .
    [
        ("v", "verb", None, "root", False),
        ("d1", "det", "n1", "det", False),
        ("n1", "noun", "v", "obj", False),
        ("to", "to", "v2", "mark", False),
        ("v2", "verb", "v", "advcl", False),
        ("d2", "det", "n2", "det", False),
        ("n2", "noun", "v2", "obj", False),
        ("p", "punct", "v", "punct", False),
    ],
    # the open call returns the result .
    [
        ("d1", "det", "n1", "det", False),
        ("cmp", "noun", "n1", "compound", False),
        ("n1", "noun", "v", "nsubj", False),
        ("v", "verb3", None, "root", False),
        ("d2", "det", "n2", "det", False),
        ("n2", "noun", "v", "obj", False),
        ("p", "punct", "v", "punct", False),
    ],
]


def corpus_words(corpus_dir: Path) -> Counter:
    counts: Counter = Counter()
    for path in sorted(corpus_dir.rglob("*.txt")):
        counts.update(path.read_text(encoding="utf-8").lower().split())
    return counts


def sentence(
    rng: random.Random, vocabulary: dict[str, list[str]]
) -> list[tuple[str, str, int, str]]:
    """(form, UPOS, head, deprel) rows of one sentence from a random template."""
    slots = [slot for slot in rng.choice(TEMPLATES) if not slot[4] or rng.random() < 0.5]
    position = {key: index + 1 for index, (key, *_rest) in enumerate(slots)}
    rows = []
    for _key, category, head, deprel, _ in slots:
        form = rng.choice(vocabulary[category])
        rows.append((form, WORDS[category][0], position[head] if head else 0, deprel))
    rows[0] = (rows[0][0].capitalize(), *rows[0][1:])
    return rows


def to_conllu(sent_id: str, rows: list[tuple[str, str, int, str]]) -> str:
    text = " ".join(form for form, *_ in rows)
    lines = [f"# sent_id = {sent_id}", f"# text = {text}"]
    for index, (form, upos, head, deprel) in enumerate(rows, start=1):
        lines.append(
            "\t".join([str(index), form, form.lower(), upos, "_", "_", str(head), deprel, "_", "_"])
        )
    return "\n".join(lines) + "\n\n"


def main(out_dir: Path, corpus_dir: Path) -> None:
    known = corpus_words(corpus_dir)
    vocabulary = {
        category: [w for w in words if known[w] >= 2] for category, (_, words) in WORDS.items()
    }
    empty = [category for category, words in vocabulary.items() if not words]
    if empty:
        raise SystemExit(f"no corpus words for {empty} in {corpus_dir}")
    rng = random.Random(SEED)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, size in SIZES.items():
        text = "".join(
            to_conllu(f"{split}-{i + 1}", sentence(rng, vocabulary)) for i in range(size)
        )
        (out_dir / f"{split}.conllu").write_text(text, encoding="utf-8")
        print(f"{size} sentences -> {out_dir / (split + '.conllu')}")


if __name__ == "__main__":
    main(
        Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures/tagged"),
        Path(sys.argv[2] if len(sys.argv) > 2 else "fixtures/demo_corpus"),
    )
