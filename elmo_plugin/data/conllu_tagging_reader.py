"""DatasetReader `conllu_tagging`: CoNLL-U sentences -> tokens + UPOS tags (downstream taggers)."""

import io
import itertools
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional, Union, cast

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.data import Instance, Token
from allennlp.data.dataset_readers import DatasetReader
from allennlp.data.fields import Field, MetadataField, SequenceLabelField, TextField
from allennlp.data.token_indexers import SingleIdTokenIndexer, TokenIndexer
from conllu.exceptions import ParseException
from conllu.parser import (
    DEFAULT_FIELDS,
    parse_conllu_plus_fields,
    parse_line,
    parse_token_and_metadata,
)

from elmo_plugin.data.corpus_stats import (
    CorpusStats,
    checked_text,
    decode_line,
    warn_invalid_utf8,
)

logger = logging.getLogger(__name__)


def is_url(path: str) -> bool:
    return "://" in path


def sentence_blocks(file_path: str) -> Iterator[tuple[int, str]]:
    """The file's sentences as (the line number of their first line, their text: the lines
    between blank lines). Invalid UTF-8 bytes become U+FFFD, with a warning naming file:line for
    the first few and one counting them all; NUL bytes too, counted in a warning; a file that is
    not text at all is a ConfigurationError naming it."""
    stats = CorpusStats(files=1)
    lines: list[str] = []
    first_line = 0
    with open(cached_path(file_path), "rb") as conllu_file:
        lines_read = checked_text(file_path, iter(conllu_file), "conllu_tagging")
        for line_number, raw in enumerate(lines_read, start=1):
            line = decode_line(raw, file_path, line_number, stats)
            if line.strip():
                first_line = first_line if lines else line_number
                lines.append(line)
            elif lines:
                yield first_line, "".join(lines).rstrip()
                lines = []
    if lines:
        yield first_line, "".join(lines).rstrip()
    if stats.invalid_utf8_lines:
        warn_invalid_utf8(stats.invalid_utf8_at, "conllu_tagging")
        logger.warning(
            "conllu_tagging: %d lines of %s had invalid UTF-8 (replaced with U+FFFD)",
            stats.invalid_utf8_lines,
            file_path,
        )
    if stats.nul_lines:
        logger.warning(
            "conllu_tagging: %d lines of %s had NUL bytes (replaced with U+FFFD)",
            stats.nul_lines,
            file_path,
        )


def parses(line: str, fields: Sequence[str]) -> bool:
    """Whether conllu parses this token line."""
    try:
        parse_line(line, fields)
    except ParseException:
        return False
    return True


def sentence_words(
    block: str, first_line: int, fields: Sequence[str], file_path: str
) -> list[dict]:
    """The syntactic-word rows (conllu `Token` dicts) of one sentence that starts at line
    `first_line`; a ConfigurationError naming file:line for a row that does not parse or has no
    form or UPOS column."""
    lines = [(first_line + offset, line.strip()) for offset, line in enumerate(block.split("\n"))]
    rows = [(number, line) for number, line in lines if line and not line.startswith("#")]
    try:
        sentence = parse_token_and_metadata(block, fields=fields)
    except ParseException as error:
        line_number = next((n for n, line in rows if not parses(line, fields)), first_line)
        raise ConfigurationError(f"conllu_tagging: {file_path}:{line_number}: {error}") from None
    for (line_number, _), row in zip(rows, sentence, strict=True):
        if row.get("form") is None or row.get("upos") is None:
            raise ConfigurationError(
                f"conllu_tagging: {file_path}:{line_number}: {len(row)} columns, a CoNLL-U "
                f"word needs {len(fields)} (ID, FORM, LEMMA, UPOS, ...; tab-separated)"
            )
    return [row for row in sentence if isinstance(row["id"], int)]


@DatasetReader.register("conllu_tagging")
class ConlluTaggingReader(DatasetReader):
    """
    Reads a CoNLL-U file lazily, one instance per sentence. Keeps only the syntactic words
    (integer ids): multiword-token lines (`3-4`) and empty nodes (`3.1`) are skipped, and so are
    comment lines. The tag is the UPOS column (4th).

    Instance fields: `tokens` TextField (default indexer: single id under `tokens`),
    `tags` SequenceLabelField in the `labels` namespace (when tags are known), and `metadata`
    (`{"words": [...]}`, so allennlp-models' `crf_tagger` returns the words with its tags).

    # Parameters

    token_indexers : `Dict[str, TokenIndexer]`, optional (default = `None`)
        How the words are indexed; `None` means one `SingleIdTokenIndexer` under `tokens`.
    **kwargs
        `DatasetReader`'s own keys (`max_instances`, ...).
    """

    def __init__(self, token_indexers: Optional[dict[str, TokenIndexer]] = None, **kwargs) -> None:
        super().__init__(
            manual_distributed_sharding=True, manual_multiprocess_sharding=True, **kwargs
        )
        self._token_indexers = token_indexers or {"tokens": SingleIdTokenIndexer()}

    def sentences(self, file_path: str) -> Iterator[Sequence[dict]]:
        """The syntactic-word rows of each sentence (conllu `Token` dicts), in file order."""
        if not is_url(file_path) and not os.path.isfile(file_path):
            raise ConfigurationError(f"conllu_tagging: CoNLL-U file not found: {file_path}")
        blocks = sentence_blocks(file_path)
        first = next(blocks, None)
        fields = parse_conllu_plus_fields(io.StringIO(first[1] if first else ""))  # CoNLL-U Plus
        for first_line, block in itertools.chain([first] if first else [], blocks):
            words = sentence_words(block, first_line, fields or DEFAULT_FIELDS, file_path)
            if words:
                yield words

    def _read(self, file_path: str) -> Iterable[Instance]:
        logger.info("conllu_tagging: reading %s", file_path)
        for words in self.shard_iterable(self.sentences(file_path)):
            yield self.text_to_instance(
                [row["form"] for row in words], [row["upos"] for row in words]
            )

    def text_to_instance(
        self, tokens: Sequence[Union[str, Token]], tags: Optional[list[str]] = None
    ) -> Instance:
        """tokens (strings or Tokens), optional UPOS tags of the same length -> Instance."""
        token_list = [token if isinstance(token, Token) else Token(token) for token in tokens]
        text_field = TextField(token_list)
        fields: dict[str, Field] = {
            "tokens": text_field,
            "metadata": MetadataField({"words": [token.ensure_text() for token in token_list]}),
        }
        if tags is not None:
            if len(tags) != len(token_list):
                raise ConfigurationError(
                    f"conllu_tagging: {len(tags)} tags for {len(token_list)} tokens: {tags}"
                )
            fields["tags"] = SequenceLabelField(tags, text_field)
        return Instance(fields)

    def apply_token_indexers(self, instance: Instance) -> None:
        cast(TextField, instance["tokens"]).token_indexers = self._token_indexers
