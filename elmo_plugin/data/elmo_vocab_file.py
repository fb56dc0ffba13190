"""The ELMo vocabulary file (`tokens.txt` / `vocab.txt`): one token per line, line i = softmax row
i. One reader and one writer, used by the `elmo_tokens_file` vocabulary, `elmo-vocab`, and the
softmax import and export, so a file maps to the same rows everywhere."""

import logging
import os
from collections.abc import Sequence

from allennlp.common.checks import ConfigurationError
from allennlp.data.vocabulary import DEFAULT_OOV_TOKEN

from elmo_plugin.data.output_file import OutputFile

logger = logging.getLogger(__name__)

BOS, EOS = "<S>", "</S>"
# Published ELMo vocabularies name the unknown word <UNK>; allennlp calls it @@UNKNOWN@@.
PUBLISHED_UNKNOWN = "<UNK>"
SPECIALS = (BOS, EOS, DEFAULT_OOV_TOKEN)
# allennlp's vocabulary files hold a token's newline as @@NEWLINE@@ and read it back as one, so
# a corpus token @@NEWLINE@@ is "\n" in the vocabulary of a loaded archive: written back as it was.
ALLENNLP_NEWLINE = "@@NEWLINE@@"


def read_elmo_vocab_file(path: str) -> list[str]:
    """The file's tokens, line i -> item i, `<UNK>` renamed to allennlp's OOV token. Lines end
    with `\n` or `\r\n`, and a byte order mark may open the file; blank lines at the end are
    ignored. A blank or whitespace-only line before the last token, a line that is not UTF-8
    (dropping it would shift every later row), or a token on two lines (one of its rows never
    scored) is an error naming file:line."""
    if not os.path.isfile(path):
        raise ConfigurationError(f"ELMo vocabulary file not found: {path}")
    with open(path, "rb") as lines:
        tokens = [
            utf8_line(raw, path, number).rstrip("\r\n") for number, raw in enumerate(lines, 1)
        ]
    if tokens:
        tokens[0] = tokens[0].removeprefix("\ufeff")  # a byte order mark opens the file
    while tokens and not tokens[-1].strip():
        tokens.pop()
    first_line: dict[str, int] = {}
    for number, token in enumerate(tokens, start=1):
        if not token.strip():
            raise ConfigurationError(
                f"{path}:{number}: blank line in an ELMo vocabulary (one token per line)"
            )
        if first_line.setdefault(token, number) != number:
            raise ConfigurationError(
                f"{path}:{number}: {token!r} again (first on line {first_line[token]}); an ELMo "
                "vocabulary holds each token once (line i is softmax row i)"
            )
    if DEFAULT_OOV_TOKEN not in tokens and PUBLISHED_UNKNOWN in tokens:
        tokens[tokens.index(PUBLISHED_UNKNOWN)] = DEFAULT_OOV_TOKEN
    return tokens


def utf8_line(raw: bytes, path: str, number: int) -> str:
    """Line `number` of `path` as text; an error naming file:line when it is not UTF-8 (a token
    with a replaced byte would be another token)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigurationError(
            f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start}): an ELMo "
            "vocabulary is UTF-8 text, one token per line"
        ) from None


def with_specials(tokens: list[str], path: str) -> list[str]:
    """`tokens` plus the missing specials (`<S>`, `</S>`, OOV) at the end, with a warning."""
    missing = [special for special in SPECIALS if special not in tokens]
    if missing:
        logger.warning("%s lacks %s; appended them", path, missing)
    return tokens + missing


def published_tokens(tokens: Sequence[str]) -> list[str]:
    """`tokens` as published ELMo vocabularies name them, for files others read: allennlp's OOV
    token becomes `<UNK>` (bilm-tf's training refuses a vocabulary without `<S>`, `</S>` and
    `<UNK>`), unless `<UNK>` is a token of its own. `read_elmo_vocab_file` reads it back."""
    if PUBLISHED_UNKNOWN in tokens:
        return list(tokens)
    return [PUBLISHED_UNKNOWN if token == DEFAULT_OOV_TOKEN else token for token in tokens]


def write_elmo_vocab_file(path: str, tokens: Sequence[str], shown: str = "") -> None:
    """One token per line (a newline in one as allennlp writes it), written whole (`OutputFile`);
    a full disk is a DiskFull naming `shown` (default `path`)."""
    with OutputFile(path, shown) as out:
        out.file.write("".join(token.replace("\n", ALLENNLP_NEWLINE) + "\n" for token in tokens))
