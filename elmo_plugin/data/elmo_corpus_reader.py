"""DatasetReader `elmo_corpus`: raw text, one sentence or paragraph per line, for biLM pretraining."""
import glob
import itertools
import logging
import lzma
import re
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import open_compressed
from allennlp.data import Instance, Token
from allennlp.data.dataset_readers import DatasetReader
from allennlp.data.fields import TextField
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from allennlp.data.tokenizers import Tokenizer, WhitespaceTokenizer

from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_text_field import ElmoTextField
from elmo_plugin.data.elmo_vocab_file import BOS, EOS

logger = logging.getLogger(__name__)

HEADING = re.compile(r"^\s*(=+)\s.*\s\1\s*$")
MAX_UTF8_WARNINGS = 5
SNIFF_LINES = 20  # a file most of whose first lines are not text is refused before any is read
Item = TypeVar("Item")


def resolve_corpus_paths(pattern: str) -> List[str]:
    """A file path or a glob -> sorted matching files; an error naming the pattern if none."""
    paths = sorted(path for path in glob.glob(pattern, recursive=True) if not path.endswith("/"))
    if not paths:
        raise ConfigurationError(f"elmo_corpus: no file matches {pattern!r}")
    return paths


@dataclass
class CorpusStats:
    """Counts of what the reader saw, skipped and repaired, for one summary log line."""

    files: int = 0
    lines: int = 0
    empty_files: int = 0
    blank_lines: int = 0
    heading_lines: int = 0
    invalid_utf8_lines: int = 0

    def summary(self, pattern: str) -> str:
        return (
            f"elmo_corpus {pattern}: {self.lines} text lines from {self.files} files; skipped "
            f"{self.empty_files} empty files, {self.blank_lines} blank lines, "
            f"{self.heading_lines} heading lines; {self.invalid_utf8_lines} lines had invalid "
            "UTF-8 (replaced with U+FFFD)"
        )


def decode_line(raw: bytes, path: str, line_number: int, stats: CorpusStats) -> str:
    """UTF-8 text of one line; invalid bytes become U+FFFD with a warning naming file:line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        stats.invalid_utf8_lines += 1
        if stats.invalid_utf8_lines <= MAX_UTF8_WARNINGS:
            logger.warning("elmo_corpus: invalid UTF-8 at %s:%d, replaced", path, line_number)
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


def shard_lines(path: str) -> Iterator[bytes]:
    """The raw lines of one shard, `.gz` / `.bz2` / `.xz` decompressed (allennlp's
    `open_compressed`); a ConfigurationError naming the file when most of its first lines are not
    text (binary, a tar, an unrecognized compressed file) or it cannot be decompressed."""
    try:
        with open_compressed(path, "rb", encoding=None) as shard:
            head = list(itertools.islice(shard, SNIFF_LINES))
            if sum(map(is_binary_line, head)) * 2 > len(head):
                raise ConfigurationError(
                    f"elmo_corpus: {path} is not text (most of its first {len(head)} lines are not UTF-8); "
                    "compressed shards must end in .gz, .bz2 or .xz"
                )
            yield from head
            yield from shard
    except (OSError, EOFError, lzma.LZMAError) as error:
        raise ConfigurationError(f"elmo_corpus: cannot read {path}: {error}") from None


@DatasetReader.register("elmo_corpus")
class ElmoCorpusReader(DatasetReader):
    """
    Reads one file or a glob of shard files, one sentence or paragraph per line, lazily;
    `.gz` / `.bz2` / `.xz` shards are decompressed, a file that is not text is an error.
    Each line is tokenized (whitespace by default), split into consecutive windows of at most
    `max_sequence_length` tokens (never dropped), and wrapped in `<S>` ... `</S>`.
    Blank lines are skipped, and `= Heading =` lines when `skip_headings`. Lines are sharded
    across distributed workers and data-loader processes, so each is read once per epoch.

    Instance: `source` TextField; default indexers `tokens` (single id, the softmax targets)
    and `elmo` (`elmo_char_ids`).
    """

    def __init__(
        self,
        tokenizer: Optional[Tokenizer] = None,
        token_indexers: Optional[Dict[str, TokenIndexer]] = None,
        max_sequence_length: Optional[int] = None,
        skip_headings: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(manual_distributed_sharding=True, manual_multiprocess_sharding=True, **kwargs)
        if max_sequence_length is not None and max_sequence_length < 1:
            raise ConfigurationError("elmo_corpus: max_sequence_length must be at least 1")
        self._tokenizer = tokenizer or WhitespaceTokenizer()
        self._token_indexers = token_indexers or {
            "tokens": SingleIdTokenIndexer(),
            "elmo": ElmoCharIdsIndexer(),
        }
        self._max_sequence_length = max_sequence_length
        self._skip_headings = skip_headings

    def corpus_lines(self, pattern: str, stats: CorpusStats) -> Iterator[Tuple[str, int, str]]:
        """(path, 1-based line number, text) for every line worth reading, in every shard."""
        for path in resolve_corpus_paths(pattern):
            stats.files += 1
            line_number = 0
            for line_number, raw in enumerate(shard_lines(path), start=1):
                text = decode_line(raw, path, line_number, stats).strip()
                if not text:
                    stats.blank_lines += 1
                elif self._skip_headings and HEADING.match(text):
                    stats.heading_lines += 1
                else:
                    stats.lines += 1
                    yield path, line_number, text
            if line_number == 0:
                stats.empty_files += 1

    def windows(self, tokens: Sequence[Item]) -> Iterator[Sequence[Item]]:
        """Consecutive windows of at most `max_sequence_length` tokens covering all tokens."""
        size = self._max_sequence_length or max(len(tokens), 1)
        for start in range(0, len(tokens), size):
            yield tokens[start : start + size]

    def _read(self, file_path: str) -> Iterable[Instance]:
        stats = CorpusStats()
        lines = self.corpus_lines(file_path, stats)
        # The whitespace tokenizer's tokens are `Token(word)` for each `str.split()` word: its
        # instances hold the words in an ElmoTextField (same tensors as a TextField, faster).
        plain_words = type(self._tokenizer) is WhitespaceTokenizer
        for _, _, text in self.shard_iterable(lines):
            if plain_words:
                for words in self.windows(text.split()):
                    yield Instance({"source": ElmoTextField([BOS, *words, EOS])})
            else:
                for window in self.windows(self._tokenizer.tokenize(text)):
                    yield self.text_to_instance(tokens=list(window))
        logger.info(stats.summary(file_path))
        if stats.lines == 0:
            raise ConfigurationError(f"elmo_corpus: no tokens at all in {file_path!r} ({stats.summary(file_path)})")

    def text_to_instance(  # type: ignore[override]
        self, sentence: Optional[str] = None, tokens: Optional[List[Token]] = None
    ) -> Instance:
        """One sentence (tokenized here) or its tokens -> Instance with `<S>` ... `</S>`."""
        if tokens is None:
            tokens = self._tokenizer.tokenize(sentence or "")
        return Instance({"source": TextField([Token(BOS), *tokens, Token(EOS)])})

    def apply_token_indexers(self, instance: Instance) -> None:
        instance["source"].token_indexers = self._token_indexers  # type: ignore[attr-defined]
