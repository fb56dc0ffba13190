"""Subcommand `allennlp elmo-vocab`: an ELMo `tokens.txt` from raw-text corpora."""

import argparse
import glob
import logging
import multiprocessing
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from typing import Optional

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.output_paths import check_not_an_input, check_output_file
from elmo_plugin.data.corpus_stats import CorpusStats
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader, resolve_corpus_paths
from elmo_plugin.data.elmo_vocab_file import SPECIALS, write_elmo_vocab_file
from elmo_plugin.data.output_file import LOCK_SUFFIX, output_lock

logger = logging.getLogger(__name__)


@Subcommand.register("elmo-vocab")
class ElmoVocab(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Write an ELMo tokens.txt (one token per line, usable by the `elmo_tokens_file` "
            f"vocabulary): {', '.join(SPECIALS)} first, then whitespace tokens by descending "
            "count, ties by first appearance."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Build an ELMo tokens.txt."
        )
        subparser.add_argument("corpus", nargs="+", help="corpus files or globs (quote globs)")
        subparser.add_argument("out_file", help="the tokens.txt to write")
        subparser.add_argument(
            "--min-count", type=int, default=1, help="drop tokens seen fewer times"
        )
        subparser.add_argument(
            "--max-size",
            type=int,
            default=None,
            help="at most this many lines in the file, the three special tokens included",
        )
        subparser.add_argument(
            "--skip-headings",
            action="store_true",
            help="skip `= Heading =` lines, as the elmo_corpus reader's skip_headings does",
        )
        subparser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="count this many shard files in parallel processes (same file as 1 worker)",
        )
        subparser.set_defaults(func=vocab_from_args)
        return subparser


@reports_errors("elmo-vocab")
def vocab_from_args(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    tokens, counted = write_elmo_vocab(
        args.corpus, args.out_file, args.min_count, args.max_size, args.skip_headings, args.workers
    )
    seconds = time.perf_counter() - start
    print(
        f"elmo-vocab: {len(tokens)} tokens ({len(SPECIALS)} special) -> {args.out_file}; "
        f"counted {counted} tokens in {seconds:.1f} s ({counted / seconds:.0f} tokens/s, "
        f"{args.workers} workers)"
    )


def count_shard(path: str, skip_headings: bool, stats: CorpusStats) -> Counter:
    """Whitespace-token counts of one shard file, keys in order of first appearance; lines are
    read as the `elmo_corpus` reader reads them (streamed, one line in memory at a time)."""
    reader = ElmoCorpusReader(skip_headings=skip_headings)
    counts: Counter = Counter()
    for _, _, text in reader.corpus_lines(glob.escape(path), stats):
        counts.update(text.split())
    return counts


def count_shard_in_worker(path: str, skip_headings: bool) -> tuple[Counter, CorpusStats]:
    """`count_shard` in a pool process, with the shard's own stats."""
    stats = CorpusStats()
    return count_shard(path, skip_headings, stats), stats


def shard_counts(
    paths: Sequence[str], skip_headings: bool, workers: int, stats: CorpusStats
) -> Iterator[Counter]:
    """Each path's `count_shard`, in path order; with workers > 1 counted in that many processes,
    at most `workers` shards in flight (so at most that many shard counters held at once)."""
    if workers == 1:
        for path in paths:
            yield count_shard(path, skip_headings, stats)
        return
    # "spawn", not "fork": a forked child can hang on a lock held at fork time by another thread
    # of this process (seen: pyarrow's jemalloc background thread, imported with allennlp's
    # plugins).
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pending: deque = deque()

        def oldest() -> Counter:
            counts, shard_stats = pending.popleft().get()
            stats.add(shard_stats)
            return counts

        for path in paths:
            if len(pending) == workers:
                yield oldest()
            pending.append(pool.apply_async(count_shard_in_worker, (path, skip_headings)))
        while pending:
            yield oldest()


def count_tokens(
    patterns: Sequence[str], skip_headings: bool = False, workers: int = 1
) -> tuple[Counter, int]:
    """Whitespace-token counts over every file the patterns match (a file matched twice is read
    once) in order of first appearance, and the number of tokens counted. Lines are read as the
    `elmo_corpus` reader reads them (blank / heading lines skipped and counted, invalid UTF-8
    replaced with a warning); the special tokens are not counted. Shards are counted by
    `workers` processes; per-shard counts are merged in path order, so keys keep their order of
    first appearance across the corpus and the result is the same for any `workers`."""
    if workers < 1:
        raise ConfigurationError(f"elmo-vocab: --workers must be at least 1, not {workers}")
    paths = list(
        dict.fromkeys(path for pattern in patterns for path in resolve_corpus_paths(pattern))
    )
    counts: Counter = Counter()
    stats = CorpusStats()
    for shard in shard_counts(paths, skip_headings, min(workers, len(paths)), stats):
        counts.update(shard)  # new keys are appended in the shard's first-appearance order
    stats.report(" ".join(patterns))
    counted = sum(counts.values())
    for special in SPECIALS:
        counts.pop(special, None)
    if not counts:
        raise ConfigurationError(
            f"elmo-vocab: no tokens at all in {', '.join(map(repr, patterns))}"
        )
    return counts, counted


def check_limits(min_count: int, max_size: Optional[int]) -> None:
    """An error for a --min-count or --max-size that cannot make a vocabulary."""
    if min_count < 1:
        raise ConfigurationError("elmo-vocab: --min-count must be at least 1")
    if max_size is not None and max_size < len(SPECIALS):
        raise ConfigurationError(
            f"elmo-vocab: --max-size must be at least {len(SPECIALS)} (the special tokens)"
        )


def vocab_tokens(counts: Counter, min_count: int = 1, max_size: Optional[int] = None) -> list[str]:
    """Specials, then tokens with count >= min_count by descending count (stable: ties keep
    first-appearance order), cut to `max_size` lines in all."""
    check_limits(min_count, max_size)
    ranked = [
        token
        for token, count in sorted(counts.items(), key=lambda item: -item[1])
        if count >= min_count
    ]
    tokens = [*SPECIALS, *ranked]
    return tokens if max_size is None else tokens[:max_size]


def write_elmo_vocab(
    patterns: Sequence[str],
    out_file: str,
    min_count: int = 1,
    max_size: Optional[int] = None,
    skip_headings: bool = False,
    workers: int = 1,
) -> tuple[list[str], int]:
    """Counts the corpora (`count_tokens`), writes `out_file` (one token per line, atomically)
    and returns its tokens and the number of tokens counted. The output path is checked before
    the corpora are read (and refused when it is one of them); `out_file.lock` is held
    meanwhile (`output_lock`). Bad limits are refused first too (`check_limits`)."""
    check_limits(min_count, max_size)
    check_output_file(out_file)
    corpus = {path: "corpus file" for pattern in patterns for path in resolve_corpus_paths(pattern)}
    check_not_an_input([out_file], corpus)
    with output_lock(out_file, out_file + LOCK_SUFFIX):
        counts, counted = count_tokens(patterns, skip_headings, workers)
        tokens = vocab_tokens(counts, min_count, max_size)
        write_elmo_vocab_file(out_file, tokens, out_file)
    return tokens, counted
