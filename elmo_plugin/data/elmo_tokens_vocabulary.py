"""Vocabulary `elmo_tokens_file`: an ELMo `tokens.txt` (one token per line, line i = softmax row i)."""
import logging
import os
import tempfile
from typing import List

from allennlp.common.checks import ConfigurationError
from allennlp.data.vocabulary import DEFAULT_OOV_TOKEN, Vocabulary

logger = logging.getLogger(__name__)

BOS, EOS = "<S>", "</S>"
# Published ELMo vocabularies name the unknown word <UNK>; allennlp's OOV token takes its row.
PUBLISHED_UNKNOWN = "<UNK>"


def read_elmo_tokens_file(tokens_file: str) -> List[str]:
    """The file's tokens in order, `<UNK>` renamed to allennlp's OOV token, missing specials
    (`<S>`, `</S>`, OOV) appended with a warning."""
    if not os.path.isfile(tokens_file):
        raise ConfigurationError(f"elmo_tokens_file: vocabulary file not found: {tokens_file}")
    with open(tokens_file, encoding="utf-8") as lines:
        tokens = [line.rstrip("\n") for line in lines if line.strip()]
    if DEFAULT_OOV_TOKEN not in tokens and PUBLISHED_UNKNOWN in tokens:
        tokens[tokens.index(PUBLISHED_UNKNOWN)] = DEFAULT_OOV_TOKEN
    missing = [special for special in (BOS, EOS, DEFAULT_OOV_TOKEN) if special not in tokens]
    if missing:
        logger.warning("elmo_tokens_file: %s lacks %s; appended them", tokens_file, missing)
    return tokens + missing


@Vocabulary.register("elmo_tokens_file", constructor="from_elmo_tokens_file")
class ElmoTokensVocabulary(Vocabulary):
    """A `tokens` namespace read from an ELMo tokens file: index 0 is padding, line i -> i + 1."""

    @classmethod
    def from_elmo_tokens_file(cls, tokens_file: str, namespace: str = "tokens") -> "Vocabulary":
        vocab = cls()
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt") as checked:
            checked.write("".join(token + "\n" for token in read_elmo_tokens_file(tokens_file)))
            checked.flush()
            vocab.set_from_file(checked.name, is_padded=True, namespace=namespace)
        return vocab
