"""Subcommand `allennlp elmo-vocab`: an ELMo `tokens.txt` from raw-text corpora."""
import argparse
import glob
import logging
from collections import Counter
from typing import List, Optional, Sequence

from allennlp.commands.subcommand import Subcommand
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.cli_errors import reports_errors
from elmo_plugin.commands.output_paths import check_output_file
from elmo_plugin.data.elmo_corpus_reader import CorpusStats, ElmoCorpusReader, resolve_corpus_paths
from elmo_plugin.data.elmo_vocab_file import SPECIALS, write_elmo_vocab_file

logger = logging.getLogger(__name__)


@Subcommand.register("elmo-vocab")
class ElmoVocab(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Write an ELMo tokens.txt (one token per line, usable by the `elmo_tokens_file` "
            f"vocabulary): {', '.join(SPECIALS)} first, then whitespace tokens by descending count, "
            "ties by first appearance."
        )
        subparser = parser.add_parser(self.name, description=description, help="Build an ELMo tokens.txt.")
        subparser.add_argument("corpus", nargs="+", help="corpus files or globs (quote globs)")
        subparser.add_argument("out_file", help="the tokens.txt to write")
        subparser.add_argument("--min-count", type=int, default=1, help="drop tokens seen fewer times")
        subparser.add_argument("--max-size", type=int, default=None,
                               help="at most this many lines in the file, the three special tokens included")
        subparser.add_argument("--skip-headings", action="store_true",
                               help="skip `= Heading =` lines, as the elmo_corpus reader's skip_headings does")
        subparser.set_defaults(func=vocab_from_args)
        return subparser


@reports_errors("elmo-vocab")
def vocab_from_args(args: argparse.Namespace) -> None:
    tokens = write_elmo_vocab(args.corpus, args.out_file, args.min_count, args.max_size, args.skip_headings)
    print(f"elmo-vocab: {len(tokens)} tokens ({len(SPECIALS)} special) -> {args.out_file}")


def count_tokens(patterns: Sequence[str], skip_headings: bool = False) -> Counter:
    """Whitespace-token counts over every file the patterns match (a file matched twice is read
    once), in order of first appearance. Lines are read as the `elmo_corpus` reader reads them
    (blank / heading lines skipped and counted, invalid UTF-8 replaced with a warning); the
    special tokens are not counted."""
    paths = list(dict.fromkeys(path for pattern in patterns for path in resolve_corpus_paths(pattern)))
    reader = ElmoCorpusReader(skip_headings=skip_headings)
    counts: Counter = Counter()
    stats = CorpusStats()
    for path in paths:
        for _, _, text in reader.corpus_lines(glob.escape(path), stats):
            counts.update(text.split())
    logger.info(stats.summary(" ".join(patterns)))
    for special in SPECIALS:
        counts.pop(special, None)
    if not counts:
        raise ConfigurationError(f"elmo-vocab: no tokens at all in {', '.join(map(repr, patterns))}")
    return counts


def vocab_tokens(counts: Counter, min_count: int = 1, max_size: Optional[int] = None) -> List[str]:
    """Specials, then tokens with count >= min_count by descending count (stable: ties keep
    first-appearance order), cut to `max_size` lines in all."""
    if min_count < 1:
        raise ConfigurationError("elmo-vocab: --min-count must be at least 1")
    if max_size is not None and max_size < len(SPECIALS):
        raise ConfigurationError(f"elmo-vocab: --max-size must be at least {len(SPECIALS)} (the special tokens)")
    ranked = [token for token, count in sorted(counts.items(), key=lambda item: -item[1]) if count >= min_count]
    tokens = [*SPECIALS, *ranked]
    return tokens if max_size is None else tokens[:max_size]


def write_elmo_vocab(
    patterns: Sequence[str],
    out_file: str,
    min_count: int = 1,
    max_size: Optional[int] = None,
    skip_headings: bool = False,
) -> List[str]:
    """Counts the corpora, writes `out_file` (one token per line, atomically) and returns its
    tokens. The output path is checked before the corpora are read."""
    check_output_file(out_file)
    tokens = vocab_tokens(count_tokens(patterns, skip_headings), min_count, max_size)
    write_elmo_vocab_file(out_file, tokens)
    return tokens
