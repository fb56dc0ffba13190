"""DatasetReader `elmo_corpus`: raw text, one sentence or paragraph per line (biLM pretraining)."""

import glob
import lzma
import os
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional, TypeVar, cast

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import open_compressed
from allennlp.data import Instance, Token
from allennlp.data.dataset_readers import DatasetReader
from allennlp.data.fields import TextField
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from allennlp.data.tokenizers import Tokenizer, WhitespaceTokenizer

from elmo_plugin.data.corpus_stats import CorpusStats, checked_text, decode_line
from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_text_field import ElmoTextField
from elmo_plugin.data.elmo_vocab_file import BOS, EOS

HEADING = re.compile(r"^\s*(=+)\s.*\s\1\s*$")
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")  # what allennlp's open_compressed decompresses
Item = TypeVar("Item")


def resolve_corpus_paths(pattern: str) -> list[str]:
    """A file path, a folder (the files directly in it, not hidden ones) or a glob -> sorted
    matching files; an error naming the pattern if none."""
    if os.path.isdir(pattern):
        names = (name for name in os.listdir(pattern) if not name.startswith("."))
        paths = sorted(os.path.join(pattern, name) for name in names)
        paths = [path for path in paths if os.path.isfile(path)]
    else:
        paths = sorted(p for p in glob.glob(pattern, recursive=True) if not os.path.isdir(p))
    if not paths:
        raise ConfigurationError(f"elmo_corpus: no file matches {pattern!r}")
    return paths


def corpus_text(path: str, lines: Iterator[bytes]) -> Iterator[bytes]:
    """`checked_text` for a corpus shard: the error names `elmo_corpus` and the suffixes that
    are decompressed."""
    hint = f"; compressed shards must end in {', '.join(COMPRESSED_SUFFIXES)}"
    return checked_text(path, lines, "elmo_corpus", hint)


def shard_lines(path: str) -> Iterator[bytes]:
    """The raw lines of one shard, `.gz` / `.bz2` / `.xz` decompressed (allennlp's
    `open_compressed`); a ConfigurationError naming the file when it is not text or cannot be
    decompressed."""
    try:
        with open_compressed(path, "rb", encoding=None) as shard:
            yield from corpus_text(path, shard)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as error:
        raise ConfigurationError(f"elmo_corpus: cannot read {path}: {error}") from None


def is_compressed(path: str) -> bool:
    """Whether `open_compressed` decompresses this shard (then it cannot be seeked cheaply)."""
    return path.endswith(COMPRESSED_SUFFIXES)


def byte_range_lines(path: str, start: int, end: int) -> Iterator[bytes]:
    """The raw lines of a plain shard that start at a byte offset in [start, end), read by
    seeking to `start` (the line holding byte `start - 1` belongs to the range before); the
    range at 0 is checked to be text like `shard_lines`."""
    try:
        with open(path, "rb") as shard:
            if start > 0:
                shard.seek(start - 1)
                shard.readline()
            lines = iter(lambda: shard.readline() if shard.tell() < end else b"", b"")
            yield from (corpus_text(path, lines) if start == 0 else lines)
    except OSError as error:
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

    Instance: `source` TextField.

    # Parameters

    tokenizer : `Tokenizer`, optional (default = `None`)
        Splits a line into tokens; `None` means allennlp's `WhitespaceTokenizer`.
    token_indexers : `Dict[str, TokenIndexer]`, optional (default = `None`)
        How the tokens are indexed; `None` means `tokens` (single id, the softmax targets) and
        `elmo` (`elmo_char_ids`).
    max_sequence_length : `int`, optional (default = `None`)
        The most tokens in an instance (without `<S>` and `</S>`); a longer line is split into
        consecutive windows. `None`: one instance per line.
    skip_headings : `bool`, optional (default = `False`)
        Skip `= Heading =` lines (WikiText's section titles).
    **kwargs
        `DatasetReader`'s own keys (`max_instances`, ...).
    """

    def __init__(
        self,
        tokenizer: Optional[Tokenizer] = None,
        token_indexers: Optional[dict[str, TokenIndexer]] = None,
        max_sequence_length: Optional[int] = None,
        skip_headings: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(
            manual_distributed_sharding=True, manual_multiprocess_sharding=True, **kwargs
        )
        if max_sequence_length is not None and max_sequence_length < 1:
            raise ConfigurationError("elmo_corpus: max_sequence_length must be at least 1")
        self._tokenizer = tokenizer or WhitespaceTokenizer()
        self._token_indexers = token_indexers or {
            "tokens": SingleIdTokenIndexer(),
            "elmo": ElmoCharIdsIndexer(),
        }
        self._max_sequence_length = max_sequence_length
        self._skip_headings = skip_headings

    @property
    def max_sequence_length(self) -> Optional[int]:
        """The most tokens of an instance without `<S>` and `</S>` (None: a whole line)."""
        return self._max_sequence_length

    def corpus_lines(self, pattern: str, stats: CorpusStats) -> Iterator[tuple[str, int, str]]:
        """(path, 1-based line number, text) for every line worth reading, in every shard."""
        for path in resolve_corpus_paths(pattern):
            stats.files += 1
            line_number = 0
            for line_number, raw in enumerate(shard_lines(path), start=1):
                text = self.line_text(raw, path, line_number, stats)
                if text:
                    yield path, line_number, text
            if line_number == 0:
                stats.empty_files += 1

    def line_text(
        self, raw: bytes, path: str, line_number: int, stats: CorpusStats, start: int = 0
    ) -> Optional[str]:
        """The stripped text of line `line_number` of the byte range of `path` from `start`;
        None for a blank line or a skipped heading."""
        text = decode_line(raw, path, line_number, stats, start).strip()
        if not text:
            stats.blank_lines += 1
            return None
        if self._skip_headings and HEADING.match(text):
            stats.heading_lines += 1
            return None
        stats.lines += 1
        return text

    def text_instances(self, text: str) -> Iterator[Instance]:
        """The instances (windows) of one line's text."""
        if type(self._tokenizer) is WhitespaceTokenizer:
            # The whitespace tokenizer's tokens are `Token(word)` for each `str.split()` word:
            # these instances hold the words in an ElmoTextField (same tensors as a TextField,
            # faster).
            for words in self.windows(text.split()):
                yield Instance({"source": ElmoTextField([BOS, *words, EOS])})
        else:
            for window in self.windows(self._tokenizer.tokenize(text)):
                yield self.text_to_instance(tokens=list(window))

    def range_instances(
        self,
        path: str,
        start: int = 0,
        end: Optional[int] = None,
        stats: Optional[CorpusStats] = None,
    ) -> Iterator[Instance]:
        """The instances of the lines of one shard that start at a byte offset in [start, end):
        a plain file is seeked to `start`, so nothing before it is read; `end=None` reads the
        whole shard (the only way for a compressed one). Not sharded across workers: the
        caller picks. What was read, skipped and repaired is counted in `stats` (the range at
        `start` 0 counts the file)."""
        stats = CorpusStats() if stats is None else stats
        raw_lines = shard_lines(path) if end is None else byte_range_lines(path, start, end)
        line_number = 0
        for line_number, raw in enumerate(raw_lines, start=1):
            text = self.line_text(raw, path, line_number, stats, start)
            if text:
                yield from self.text_instances(text)
        if start == 0:
            stats.files += 1
            stats.empty_files += line_number == 0

    def windows(self, tokens: Sequence[Item]) -> Iterator[Sequence[Item]]:
        """Consecutive windows of at most `max_sequence_length` tokens covering all tokens."""
        size = self._max_sequence_length or max(len(tokens), 1)
        for start in range(0, len(tokens), size):
            yield tokens[start : start + size]

    def _read(self, file_path: str) -> Iterable[Instance]:
        stats = CorpusStats()
        lines = self.corpus_lines(file_path, stats)
        for _, _, text in self.shard_iterable(lines):
            yield from self.text_instances(text)
        stats.report(file_path)
        stats.require_text(file_path)

    def text_to_instance(
        self, sentence: Optional[str] = None, tokens: Optional[list[Token]] = None
    ) -> Instance:
        """One sentence (tokenized here) or its tokens -> Instance with `<S>` ... `</S>`."""
        if tokens is None:
            tokens = self._tokenizer.tokenize(sentence or "")
        return Instance({"source": TextField([Token(BOS), *tokens, Token(EOS)])})

    def apply_token_indexers(self, instance: Instance) -> None:
        """The reader's indexers on `source` and, in `elmo_streams`' windows, `backward_source`."""
        for name in ("source", "backward_source"):
            if name in instance:
                cast(TextField, instance[name]).token_indexers = self._token_indexers
