"""Writes a synthetic corpus with the statistics of the 1B Word Benchmark, for scale runs.

    python scripts/make_scale_corpus.py --tokens N --shards K --out DIR [--seed S]

DIR gets exactly K shard files `shard-00000-of-000KK.txt` (nothing else), one whitespace-
tokenized sentence per line, N tokens in all (exactly: the last sentence is cut short to land
on N). Shards end at sentence boundaries and hold about N / K tokens each (some are empty
when N < K).
`tokens.txt` goes BESIDE DIR (in DIR's parent), as 1B Word users get theirs from the bilm-tf /
AllenNLP walkthrough: `<S>`, `</S>`, `<UNK>`, then the 793,468 words by decreasing frequency
(793,471 lines, ELMo's n_tokens_vocab). Read it with the `elmo_tokens_file` vocabulary.

What is 1B Word-like:
- a fixed list of 793,468 word types (the same for every seed): common English words and
  punctuation first, then generated words: lowercase and Capitalized pseudo-words, hyphenated
  compounds, numbers, acronyms, possessives, accented words, URLs, some Cyrillic and CJK.
  Frequent types are short, rare ones longer (mean type length about 8.9 characters, a few
  over 25), so the character CNN does real work.
- Zipfian word frequencies (exponent 1) over the whole list.
- sentence lengths: log-normal plus a few short lines, mean about 27 tokens, minimum 1, a long
  tail past 100 (about 0.4% of sentences; the longest in 50M tokens about 300).
Deterministic: the same arguments give byte-identical files (numpy Generator(PCG64(seed))), and
the text does not depend on K (only where it is cut into shards).

Each shard is written under a temporary name in DIR's parent and renamed into DIR when
complete. Memory stays bounded (generated and written in blocks); prints tokens/s and a summary.
"""

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO, Optional

import numpy as np

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIALS = [BOS, EOS, UNK]
NUM_TYPES = 793_471  # lines of 1B Word's tokens.txt (ELMo's n_tokens_vocab), specials included
NUM_WORDS = NUM_TYPES - len(SPECIALS)
ONE_BILLION_WORD_TOKENS = 768_648_884
DEFAULT_TOKENS = 50_000_000
ZIPF_EXPONENT = 1.0
TYPES_SEED = 20131211  # the type list is fixed, whatever --seed
# Sentence lengths: log-normal, mean ~28, with 4% short lines (mean ~6): mean ~27 in all.
SENTENCE_LOG_MEAN, SENTENCE_LOG_SIGMA = 3.177, 0.55
SHORT_SHARE, SHORT_LOG_MEAN, SHORT_LOG_SIGMA = 0.04, 1.61, 0.6
SENTENCES_PER_BLOCK = 16_384  # ~440k tokens per generated block
GUIDE_BUCKETS = 1 << 21  # Zipf sampler's guide table
TOP_K = 10_000
RESERVED = {"@@PADDING@@", "@@UNKNOWN@@", *SPECIALS}

# The most frequent tokens, roughly in 1B Word's order (PTB-like tokenization).
HEAD = """
the , . to of and a in " 's that for is - on was with said he it as at by from his The be
have has but are not ( ) an I they who will had its were : been $ their more would we this year
which one after about or up also new ' -- percent than out people last first -- two when there
she In It million But over time He can into years could all some if her what so no other
only them just because like government most now back A three ; do made you him make before our
any being us did against state world while where still then these well such ? told under
very many even since how both during between off down may get week next day says those
including police much part including should country company home ! her through around your
New U.S. Mr. n't 're 've 'm 'll 'd going per team second game say way take work good found
called know our market think another according public left city group children set without
four help five end high used each life season United next law family told whether might
former Obama This They There We She British among number 10 cent health
until already 1 2 3 5 20 30 2008 2009 2010 15 100 2007 right support come did n't place
expected political American business money points win away told months economic show later
... against top national long early today man few final officials same plan
deal help & % / * # + = @
""".split()


def word_types() -> list[str]:
    """The fixed list of NUM_WORDS distinct word types, most frequent first."""
    rng = np.random.Generator(np.random.PCG64(TYPES_SEED))
    head = list(dict.fromkeys(HEAD))
    seen = set(head) | RESERVED
    needed = NUM_WORDS - len(head)
    tails, tail_offsets = [], []
    while needed:  # candidates collide (short ones often): draw more until there are enough
        pool, offsets = _type_candidates(rng, int(needed * 1.3) + 1000)
        order = rng.permutation(len(pool))
        pool, offsets = pool[order], offsets[order]
        keep = np.zeros(len(pool), dtype=bool)
        for index, word in enumerate(pool.tolist()):
            if word not in seen:
                seen.add(word)
                keep[index] = True
                needed -= 1
                if needed == 0:
                    break
        tails.append(pool[keep])
        tail_offsets.append(offsets[keep])
    tail, offsets = np.concatenate(tails), np.concatenate(tail_offsets)
    lengths = np.fromiter((len(word) for word in tail.tolist()), dtype=np.float64, count=len(tail))
    # Rank by length plus noise: frequent types short, rare ones longer, not strictly so.
    key = np.log(lengths) + offsets + rng.normal(0.0, 0.5, len(tail))
    tail = tail[np.argsort(key, kind="stable")]
    return head + tail.tolist()


def _type_candidates(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` candidate types (duplicates possible) and a rank offset per candidate (higher is
    rarer), by kind: plain, Capitalized, accented, hyphenated, possessive, numbers, acronyms,
    URLs, Cyrillic, CJK."""
    shares = {
        "lower": 0.46,
        "capital": 0.22,
        "accented": 0.05,
        "hyphen": 0.08,
        "possessive": 0.03,
        "number": 0.08,
        "acronym": 0.03,
        "url": 0.02,
        "cyrillic": 0.02,
        "cjk": 0.01,
    }
    offset = {
        "lower": 0.0,
        "capital": 0.15,
        "accented": 0.6,
        "hyphen": 0.3,
        "possessive": 0.4,
        "number": 0.3,
        "acronym": 0.5,
        "url": 0.8,
        "cyrillic": 1.0,
        "cjk": 1.8,
    }
    sizes = {kind: int(count * share) + 1 for kind, share in shares.items()}
    parts = {
        "lower": _pseudo_words(rng, sizes["lower"]),
        "capital": _capitalize(_pseudo_words(rng, sizes["capital"])),
        "accented": _accent(rng, _pseudo_words(rng, sizes["accented"])),
        "hyphen": _pseudo_words(rng, sizes["hyphen"], max_syllables=2)
        + "-"
        + _pseudo_words(rng, sizes["hyphen"], max_syllables=2),
        "possessive": _capitalize(_pseudo_words(rng, sizes["possessive"])) + "'s",
        "number": _numbers(rng, sizes["number"]),
        "acronym": _acronyms(rng, sizes["acronym"]),
        "url": _urls(rng, sizes["url"]),
        "cyrillic": _letters(rng, sizes["cyrillic"], 0x0430, 32, 3, 11, capitalize=0.4),
        "cjk": _letters(rng, sizes["cjk"], 0x4E00, 20_902, 1, 5),
    }
    pool = np.concatenate([parts[kind] for kind in shares])
    offsets = np.concatenate([np.full(len(parts[kind]), offset[kind]) for kind in shares])
    return pool, offsets


ONSETS = (
    ("",) * 6
    + tuple("bcdlmnprst")
    + tuple("bcdfghjklmnprstvwyz")
    + ("br", "ch", "cr", "dr", "fr", "gr", "pl", "pr", "sh", "st", "th", "tr")
)
NUCLEI = tuple("aaaeeeiioouy") + ("ai", "ea", "ee", "ou")
CODAS = ("",) * 12 + tuple("nnrrstlmd") + ("nd", "nt", "rs", "st", "ng", "ll")
SUFFIXES = (
    "s",
    "s",
    "s",
    "ed",
    "ing",
    "er",
    "ers",
    "ly",
    "tion",
    "ism",
    "ist",
    "ness",
    "able",
    "al",
    "ic",
    "ity",
    "ment",
    "ville",
    "son",
    "berg",
)
SYLLABLES = np.array(
    [""] + [o + n + c for o in ONSETS for n in NUCLEI for c in CODAS], dtype=object
)
SYLLABLE_COUNTS = np.array([1, 2, 3, 4, 5, 6, 7])
SYLLABLE_PROBS = np.array([0.36, 0.41, 0.16, 0.05, 0.015, 0.004, 0.001])


def _pseudo_words(rng: np.random.Generator, count: int, max_syllables: int = 7) -> np.ndarray:
    probs = SYLLABLE_PROBS[:max_syllables] / SYLLABLE_PROBS[:max_syllables].sum()
    syllables = rng.choice(SYLLABLE_COUNTS[:max_syllables], size=count, p=probs)
    ids = rng.integers(1, len(SYLLABLES), size=(count, max_syllables))
    ids[np.arange(max_syllables)[None, :] >= syllables[:, None]] = 0  # "" past each word's end
    words = SYLLABLES[ids[:, 0]]
    for column in range(1, max_syllables):
        words = words + SYLLABLES[ids[:, column]]
    suffixes = np.array(("",) * 80 + SUFFIXES, dtype=object)  # 20% get a suffix
    return words + suffixes[rng.integers(0, len(suffixes), count)]


def _capitalize(words: np.ndarray) -> np.ndarray:
    return np.array([word.capitalize() for word in words.tolist()], dtype=object)


ACCENTS = [
    str.maketrans(table)
    for table in (
        {"e": "é"},
        {"e": "è"},
        {"u": "ü"},
        {"o": "ö"},
        {"a": "á"},
        {"a": "ä"},
        {"n": "ñ"},
        {"c": "ç"},
        {"i": "í"},
        {"o": "ó"},
        {"a": "à", "e": "ê"},
        {"s": "ß"},
        {"o": "ø"},
        {"a": "å"},
    )
]


def _accent(rng: np.random.Generator, words: np.ndarray) -> np.ndarray:
    tables = rng.integers(0, len(ACCENTS), len(words)).tolist()
    capital = (rng.random(len(words)) < 0.5).tolist()
    accented = [
        word.translate(ACCENTS[table]) for word, table in zip(words.tolist(), tables, strict=True)
    ]
    return np.array(
        [word.capitalize() if cap else word for word, cap in zip(accented, capital, strict=True)],
        dtype=object,
    )


def _numbers(rng: np.random.Generator, count: int) -> np.ndarray:
    kinds = rng.integers(0, 8, count).tolist()
    values = rng.integers(0, 10**9, count).tolist()
    digits = rng.integers(1, 8, count).tolist()
    out = []
    for kind, value, width in zip(kinds, values, digits, strict=True):
        small = value % 10**width
        if kind == 0:
            out.append(str(small))
        elif kind == 1:
            out.append(f"{small:,}")
        elif kind == 2:
            out.append(f"{small % 100_000}.{value % 1000:0{1 + value % 3}d}")
        elif kind == 3:
            out.append(f"{1700 + value % 330}s" if value % 2 else _ordinal(small % 1000 + 1))
        elif kind == 4:
            out.append(f"{value % 24}:{value % 60:02d}")
        elif kind == 5:
            out.append(f"{value % 10_000}/{value % 97 + 1}")
        elif kind == 6:
            out.append(f"{value % 1000:03d}-{value % 10_000:04d}")
        else:
            unit = ("year", "point", "yard", "day", "mile", "foot", "minute")[value % 7]
            out.append(f"{value % 1000}-{unit}")
    return np.array(out, dtype=object)


def _ordinal(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"


def _letters(
    rng: np.random.Generator,
    count: int,
    first: int,
    span: int,
    low: int,
    high: int,
    capitalize: float = 0.0,
) -> np.ndarray:
    """Words of `low`..`high - 1` letters from the code points first .. first + span - 1."""
    lengths = rng.integers(low, high, count)
    codes = rng.integers(first, first + span, int(lengths.sum()))
    text = "".join(map(chr, codes.tolist()))
    ends = np.cumsum(lengths).tolist()
    capital = (rng.random(count) < capitalize).tolist()
    words, start = [], 0
    for end, cap in zip(ends, capital, strict=True):
        words.append(text[start:end].capitalize() if cap else text[start:end])
        start = end
    return np.array(words, dtype=object)


def _acronyms(rng: np.random.Generator, count: int) -> np.ndarray:
    text = _letters(rng, count, ord("A"), 26, 2, 6).tolist()
    dotted = (rng.random(count) < 0.2).tolist()
    return np.array(
        [".".join(word) + "." if dot else word for word, dot in zip(text, dotted, strict=True)],
        dtype=object,
    )


def _urls(rng: np.random.Generator, count: int) -> np.ndarray:
    names = _pseudo_words(rng, count, max_syllables=3) + _pseudo_words(rng, count, max_syllables=2)
    tlds = np.array([".com", ".org", ".net", ".co.uk", ".gov"], dtype=object)[
        rng.integers(0, 5, count)
    ]
    email = rng.random(count) < 0.3
    users = _pseudo_words(rng, count, max_syllables=2)
    return np.where(email, users + "@" + names + tlds, "www." + names + tlds)


class ZipfSampler:
    """Word ids 0..n-1 with P(i) proportional to (i + 1) ** -exponent: inverse CDF with a guide
    table (exact: the same ids as a binary search of the CDF)."""

    def __init__(self, num_words: int, exponent: float = ZIPF_EXPONENT) -> None:
        weights = np.arange(1, num_words + 1, dtype=np.float64) ** -exponent
        self.cdf = np.cumsum(weights)
        self.cdf /= self.cdf[-1]
        self.cdf[-1] = 1.0
        grid = np.arange(GUIDE_BUCKETS + 1, dtype=np.float64) / GUIDE_BUCKETS
        self.guide = np.searchsorted(self.cdf, grid, side="right").astype(np.int64)
        np.minimum(self.guide, num_words - 1, out=self.guide)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        uniform = rng.random(count)
        bucket = (uniform * GUIDE_BUCKETS).astype(np.int64)
        ids = self.guide[bucket]
        ambiguous = np.flatnonzero(ids != self.guide[bucket + 1])
        ids[ambiguous] = np.searchsorted(self.cdf, uniform[ambiguous], side="right")
        return ids


def sentence_lengths(rng: np.random.Generator, count: int) -> np.ndarray:
    """1B Word-like sentence lengths in tokens: log-normal (mean ~28) mixed with a few short
    lines (mean ~6, like headlines); mean ~27, minimum 1, a long tail past 100."""
    lengths = rng.lognormal(SENTENCE_LOG_MEAN, SENTENCE_LOG_SIGMA, count)
    short = rng.lognormal(SHORT_LOG_MEAN, SHORT_LOG_SIGMA, count)
    lengths = np.where(rng.random(count) < SHORT_SHARE, short, lengths)
    return np.maximum(np.rint(lengths).astype(np.int64), 1)


class Renderer:
    """Word ids + sentence lengths -> UTF-8 bytes, tokens joined by spaces, one sentence a line."""

    def __init__(self, words: list[str]) -> None:
        encoded = [word.encode("utf-8") for word in words]
        self.lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        # One spare byte at the end: each token's separator slot reads one byte past its type.
        self.buffer = np.frombuffer(b"".join(encoded) + b"\0", dtype=np.uint8)

    def render(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(bytes as uint8, byte offset where each sentence's line ends, exclusive)."""
        sizes = self.lengths[ids] + 1  # the type, then " " or "\n"
        ends = np.cumsum(sizes)
        source = np.repeat(self.starts[ids] - (ends - sizes), sizes)
        source += np.arange(ends[-1])
        out = self.buffer[source]
        out[ends - 1] = ord(" ")
        line_ends = ends[np.cumsum(lengths) - 1]
        out[line_ends - 1] = ord("\n")
        return out, line_ends


def corpus_blocks(
    total_tokens: int, seed: int, sampler: ZipfSampler, renderer: Renderer
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Blocks of the corpus: (ids, sentence lengths, bytes, line end offsets), `total_tokens`
    tokens in all; the last sentence is cut short to land exactly on it."""
    rng = np.random.Generator(np.random.PCG64(seed))
    produced = 0
    while produced < total_tokens:
        lengths = sentence_lengths(rng, SENTENCES_PER_BLOCK)
        cumulative = np.cumsum(lengths)
        remaining = total_tokens - produced
        if cumulative[-1] >= remaining:
            keep = int(np.searchsorted(cumulative, remaining, side="left")) + 1
            lengths = lengths[:keep]
            lengths[-1] -= int(cumulative[keep - 1]) - remaining
        ids = sampler.sample(rng, int(lengths.sum()))
        data, line_ends = renderer.render(ids, lengths)
        produced += len(ids)
        yield ids, lengths, data, line_ends


def shard_name(index: int, shards: int) -> str:
    return f"shard-{index:05d}-of-{shards:05d}.txt"


class ShardWriter:
    """Writes shard i under a temporary name in DIR's parent, renames it into DIR when done."""

    def __init__(self, out_dir: str, shards: int) -> None:
        self.out_dir, self.shards = out_dir, shards
        self.parent = os.path.dirname(out_dir)
        self.index, self.temp_path = -1, ""
        self.file: Optional[BinaryIO] = None

    def advance_to(self, index: int) -> None:
        while self.index < index:
            self.finish()
            self.index += 1
            name = shard_name(self.index, self.shards)
            temp_name = f".{os.path.basename(self.out_dir)}.{name}.partial-{os.getpid()}"
            self.temp_path = os.path.join(self.parent, temp_name)
            self.file = open(self.temp_path, "wb")

    def write(self, data) -> None:
        if self.file is None:
            raise ValueError("ShardWriter.write before advance_to")
        self.file.write(data)

    def finish(self) -> None:
        if self.file is not None:
            self.file.close()
            os.replace(
                self.temp_path, os.path.join(self.out_dir, shard_name(self.index, self.shards))
            )
            self.file, self.temp_path = None, ""

    def abort(self) -> None:
        if self.file is not None:
            self.file.close()
            os.unlink(self.temp_path)
            self.file, self.temp_path = None, ""


def write_tokens_file(path: str, words: list[str]) -> None:
    temp = f"{path}.partial-{os.getpid()}"
    with open(temp, "w", encoding="utf-8", newline="\n") as out:
        out.write("\n".join(SPECIALS + words) + "\n")
    os.replace(temp, path)


def refuse(message: str) -> None:
    print(f"make_scale_corpus.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Write a synthetic corpus with the 1B Word Benchmark's statistics "
        "(793,471-line tokens.txt, Zipfian word frequencies, 1B Word-like sentence lengths) as K "
        "shards.",
        epilog="DIR must not exist or be empty; tokens.txt is written beside DIR, in its parent.",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=DEFAULT_TOKENS,
        metavar="N",
        help=f"total tokens, exactly (the last sentence is cut short to land on N); "
        f"default {DEFAULT_TOKENS:_}. 1B Word's training set has 768.6M "
        f"({ONE_BILLION_WORD_TOKENS:_}); underscores allowed",
    )
    parser.add_argument(
        "--shards",
        type=int,
        required=True,
        metavar="K",
        help="number of shard files in DIR (split at sentence boundaries, ~N/K tokens each; "
        "when N < K some are empty)",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="folder for the shards (created)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="S", help="random seed of the text (default 0)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.tokens < 1:
        refuse(f"--tokens must be at least 1, got {args.tokens}")
    if args.shards < 1:
        refuse(f"--shards must be at least 1, got {args.shards}")
    out_dir = os.path.abspath(args.out)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        refuse(f"--out {args.out} exists and is not a folder")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        refuse(f"--out {args.out} exists and is not empty")
    if args.seed < 0:
        refuse(f"--seed must be non-negative, got {args.seed}")

    started = time.perf_counter()
    words = word_types()
    os.makedirs(out_dir, exist_ok=True)
    tokens_file = os.path.join(os.path.dirname(out_dir), "tokens.txt")
    write_tokens_file(tokens_file, words)
    sampler, renderer = ZipfSampler(len(words)), Renderer(words)
    types_seconds = time.perf_counter() - started

    # Shard i takes every sentence starting before token N * (i + 1) / K.
    targets = np.array(
        [args.tokens * (i + 1) // args.shards for i in range(args.shards)], dtype=np.int64
    )
    used = np.zeros(len(words), dtype=bool)
    tokens = sentences = top_tokens = long_sentences = max_length = 0
    writer = ShardWriter(out_dir, args.shards)
    try:
        for ids, lengths, data, line_ends in corpus_blocks(
            args.tokens, args.seed, sampler, renderer
        ):
            sentence_starts = tokens + np.cumsum(lengths) - lengths
            shard_of = np.searchsorted(targets, sentence_starts, side="right")
            line_starts = line_ends - np.diff(line_ends, prepend=0)
            for shard in np.unique(shard_of).tolist():
                rows = np.flatnonzero(shard_of == shard)
                writer.advance_to(shard)
                writer.write(data[line_starts[rows[0]] : line_ends[rows[-1]]].tobytes())
            used[ids] = True
            tokens += len(ids)
            sentences += len(lengths)
            top_tokens += int(np.count_nonzero(ids < TOP_K))
            long_sentences += int(np.count_nonzero(lengths > 100))
            max_length = max(max_length, int(lengths.max()))
        writer.advance_to(args.shards - 1)  # shards no sentence reached (N < K) are empty
        writer.finish()
    except BaseException:
        writer.abort()
        raise
    elapsed = time.perf_counter() - started
    generate = elapsed - types_seconds

    type_lengths = renderer.lengths  # bytes; characters below
    char_lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    print(
        f"wrote {tokens:,} tokens in {sentences:,} sentences to {args.shards} shards in {out_dir}"
    )
    print(
        f"wrote {tokens_file}: {len(words) + len(SPECIALS):,} lines "
        f"({', '.join(SPECIALS)}, then words by frequency)"
    )
    print(
        f"types used: {int(used.sum()):,} of {len(words):,}; mean sentence length "
        f"{tokens / sentences:.2f} tokens (max {max_length}, {long_sentences:,} over 100); tokens "
        f"in the top {TOP_K:,} types: {top_tokens / tokens:.1%}"
    )
    print(
        f"mean type length {char_lengths.mean():.2f} characters (max {char_lengths.max()}, "
        f"{int((char_lengths > 25).sum()):,} over 25; "
        f"{int((type_lengths > char_lengths).sum()):,} non-ASCII types)"
    )
    print(
        f"elapsed {elapsed:.1f} s (type list {types_seconds:.1f} s, corpus {generate:.1f} s): "
        f"{tokens / max(generate, 1e-9):,.0f} tokens/s generating, "
        f"{tokens / elapsed:,.0f} tokens/s overall"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
