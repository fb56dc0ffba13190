"""What `allennlp elmo-embed` reads: a text file (plain, `.gz`, `.bz2` or `.xz`), standard input
(`-`) or another stream (a FIFO, `<(...)`), refused when it is not text (as the `elmo_corpus`
reader refuses a shard), and the lines of one `--shard I/N`."""

import itertools
import os
import re
import sys
from collections.abc import Generator, Iterable, Iterator
from typing import NamedTuple

from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.corpus_stats import CorpusStats, decode_line
from elmo_plugin.data.elmo_corpus_reader import corpus_text, shard_lines

STDIN = "-"
STDIN_NAME = "standard input"
SHARD_FORM = re.compile(r"^(\d+)/(\d+)$")


class Shard(NamedTuple):
    """Shard `part` of `parts`: the input's windows of `block` sentences (`elmo-embed`'s sort
    windows: `block` non-blank lines, with the blank lines among them) whose 0-based number
    modulo `parts` is `part`. A shard's windows are the unsharded run's windows, batched the
    same way, so its vectors equal the unsharded ones bit for bit."""

    part: int = 0
    parts: int = 1
    block: int = 1

    def owned(self, lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
        """(0-based line number, line) of this shard's lines."""
        sentences = 0
        for index, raw in enumerate(lines):
            if (sentences // self.block) % self.parts == self.part:
                yield index, raw
            # str.split, as elmo-embed splits a line into tokens (decoding errors replaced)
            sentences += bool(raw.decode("utf-8", "replace").split())

    def __str__(self) -> str:
        return f"{self.part}/{self.parts}"


def parse_shard(value: str, block: int = 1) -> Shard:
    """`I/N` with 0 <= I < N -> Shard(I, N, block); a ConfigurationError naming the value
    otherwise."""
    match = SHARD_FORM.match(value.strip())
    if not match or not int(match.group(1)) < int(match.group(2)):
        raise ConfigurationError(
            f"elmo-embed: --shard must be I/N with 0 <= I < N (e.g. 0/4), got {value!r}"
        )
    return Shard(int(match.group(1)), int(match.group(2)), block)


def _refused(error: ConfigurationError) -> ConfigurationError:
    message = str(error).removeprefix("elmo_corpus: ")
    return ConfigurationError(f"elmo-embed: {message}")


def raw_lines(path: str) -> Generator[bytes, None, None]:
    """The raw lines of the input; a ConfigurationError naming it when it is not text."""
    try:
        if path == STDIN:
            yield from corpus_text(STDIN_NAME, iter(sys.stdin.buffer))
        else:
            yield from shard_lines(path)
    except ConfigurationError as error:
        raise _refused(error) from None


def is_stream(path: str) -> bool:
    """Standard input, a FIFO or a process substitution (`<(...)`): read once, so not checked
    ahead, counted for progress or resumed."""
    return path == STDIN or (os.path.exists(path) and not os.path.isfile(path))


def check_input(path: str) -> None:
    """Before any work: a file that exists and whose first lines are text (a stream is checked
    when it is read, before anything is written)."""
    if path == STDIN:
        return
    if not os.path.exists(path):
        raise ConfigurationError(f"elmo-embed: input file not found: {path}")
    if os.path.isdir(path):
        raise ConfigurationError(f"elmo-embed: input {path} is a folder, not a text file")
    if is_stream(path):
        return
    lines = raw_lines(path)
    next(lines, None)  # reads and checks the first lines
    lines.close()


def numbered_lines(path: str, stats: CorpusStats, shard: Shard) -> Iterator[tuple[int, str]]:
    """(0-based line number, stripped text) of every line of `shard`, blank ones included. The
    input's first lines are read and checked to be text now, before the caller writes anything."""
    lines = raw_lines(path)
    first = next(lines, None)
    every = itertools.chain([] if first is None else [first], lines)
    return _decoded(every, STDIN_NAME if path == STDIN else path, stats, shard)


def _decoded(
    lines: Iterator[bytes], name: str, stats: CorpusStats, shard: Shard
) -> Iterator[tuple[int, str]]:
    for index, raw in shard.owned(lines):
        yield index, decode_line(raw, name, index + 1, stats).strip()


def count_tokens(path: str, shard: Shard) -> int:
    """Whitespace-separated tokens in the shard's lines of a file (for the progress bar)."""
    return sum(len(raw.split()) for _, raw in shard.owned(raw_lines(path)))
