"""What a read of a text corpus saw, skipped and repaired (`CorpusStats`), for one summary line
and a warning for each of the first few lines with invalid UTF-8, named by file:line. A read
may be split into byte ranges read apart (chunks, worker processes): each range counts in its
own `CorpusStats`, the reader of the whole adds them up (`add`) and warns once for the whole.
A file most of whose first lines are not text at all is refused (`checked_text`)."""

import codecs
import itertools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields

from allennlp.common.checks import ConfigurationError

logger = logging.getLogger(__name__)

MAX_UTF8_WARNINGS = 5  # lines with invalid UTF-8 named in warnings, per read of a corpus
COUNT_BLOCK_BYTES = 1 << 20
SNIFF_LINES = 20  # a file most of whose first lines are not text is refused before any is read


def lines_before(path: str, start: int) -> int:
    """How many lines of `path` come before the first line that starts at a byte offset >= `start`
    (0 for `start` 0): reads the file up to `start`."""
    if start == 0:
        return 0
    newlines, left = 0, start - 1
    with open(path, "rb") as file:
        while left > 0:
            block = file.read(min(left, COUNT_BLOCK_BYTES))
            if not block:
                break
            newlines, left = newlines + block.count(b"\n"), left - len(block)
    return newlines + 1  # the line holding byte start - 1 ends before the first one read


@dataclass(frozen=True)
class LinePlace:
    """Line `line` (1-based) of a byte range of `path` that begins at byte `start`."""

    path: str
    line: int
    start: int = 0

    def __str__(self) -> str:
        """`FILE:LINE`, LINE counted from the start of the file (the bytes before `start` are
        read to count them)."""
        return f"{self.path}:{lines_before(self.path, self.start) + self.line}"


@dataclass
class CorpusStats:
    """Counts of what a read saw, skipped and repaired, and where the first lines with invalid
    UTF-8 are (at most `MAX_UTF8_WARNINGS`)."""

    files: int = 0
    lines: int = 0
    empty_files: int = 0
    blank_lines: int = 0
    heading_lines: int = 0
    invalid_utf8_lines: int = 0
    invalid_utf8_at: list[LinePlace] = field(default_factory=list)
    nul_lines: int = 0

    def count_invalid_utf8(self, place: LinePlace) -> None:
        self.invalid_utf8_lines += 1
        if len(self.invalid_utf8_at) < MAX_UTF8_WARNINGS:
            self.invalid_utf8_at.append(place)

    def add(self, other: "CorpusStats") -> list[LinePlace]:
        """Adds the counts of `other` (a later part of the same read); returns the places of its
        invalid UTF-8 that are among the first `MAX_UTF8_WARNINGS` of the sum."""
        for count in fields(self):
            if isinstance(getattr(self, count.name), int):
                setattr(self, count.name, getattr(self, count.name) + getattr(other, count.name))
        kept = other.invalid_utf8_at[: MAX_UTF8_WARNINGS - len(self.invalid_utf8_at)]
        self.invalid_utf8_at.extend(kept)
        return kept

    def summary(self, pattern: str) -> str:
        return (
            f"elmo_corpus {pattern}: {self.lines} text lines from {self.files} files; skipped "
            f"{self.empty_files} empty files, {self.blank_lines} blank lines, "
            f"{self.heading_lines} heading lines; {self.invalid_utf8_lines} lines had invalid "
            "UTF-8 (replaced with U+FFFD)"
            + (f"; {self.nul_lines} lines had NUL bytes (replaced too)" if self.nul_lines else "")
        )

    def report(self, pattern: str, prefix: str = "") -> None:
        """Logs a warning for each place of invalid UTF-8 kept, then the summary line."""
        warn_invalid_utf8(self.invalid_utf8_at)
        logger.info("%s%s", prefix, self.summary(pattern))

    def require_text(self, pattern: str) -> None:
        """A ConfigurationError naming `pattern` when the read found no text at all."""
        if self.lines == 0:
            raise ConfigurationError(
                f"elmo_corpus: no tokens at all in {pattern!r} ({self.summary(pattern)})"
            )


def warn_invalid_utf8(places: Iterable[LinePlace], reader: str = "elmo_corpus") -> None:
    """A warning naming each place (`reader`: who read the file, for the line's prefix)."""
    for place in places:
        logger.warning("%s: invalid UTF-8 at %s, replaced", reader, place)


def decode_line(raw: bytes, path: str, line_number: int, stats: CorpusStats, start: int = 0) -> str:
    """UTF-8 text of line `line_number` of the byte range of `path` from `start`, without the
    byte order mark that may open a file; invalid bytes become U+FFFD, and the line is counted
    (and placed) in `stats`; so do NUL bytes (counted only): no token, vocabulary file or output
    holds one."""
    if line_number == 1 and start == 0:
        raw = raw.removeprefix(codecs.BOM_UTF8)
    if b"\0" in raw:
        stats.nul_lines += 1
        raw = raw.replace(b"\0", "\ufffd".encode())
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.count_invalid_utf8(LinePlace(path, line_number, start))
        return raw.decode("utf-8", errors="replace")


def is_binary_line(raw: bytes) -> bool:
    """Invalid UTF-8, or a quarter or more NUL bytes (UTF-16, tar headers); a few stray NULs or
    bad bytes in text are repaired, not refused."""
    if raw.count(b"\0") * 4 >= len(raw) > 0:
        return True
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def checked_text(path: str, lines: Iterator[bytes], reader: str, hint: str = "") -> Iterator[bytes]:
    """`lines`, after a ConfigurationError naming `reader` and the file when most of its first
    `SNIFF_LINES` lines are not text (binary, a tar, a compressed file); `hint` ends the message."""
    head = list(itertools.islice(lines, SNIFF_LINES))
    if sum(map(is_binary_line, head)) * 2 > len(head):
        raise ConfigurationError(
            f"{reader}: {path} is not text (most of its first {len(head)} lines are not UTF-8): "
            f"re-encode it as UTF-8, e.g. `iconv -f latin1 -t utf-8`{hint}"
        )
    yield from head
    yield from lines
