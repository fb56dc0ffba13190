"""Vocabulary `elmo_tokens_file`: an ELMo `tokens.txt` (line i = token i = softmax row i)."""

import os
import tempfile

from allennlp.common.checks import ConfigurationError
from allennlp.data.vocabulary import Vocabulary

from elmo_plugin.data.elmo_vocab_file import (
    SPECIALS,
    read_elmo_vocab_file,
    with_specials,
    write_elmo_vocab_file,
)


@Vocabulary.register("elmo_tokens_file", constructor="from_elmo_tokens_file")
class ElmoTokensVocabulary(Vocabulary):
    """A `tokens` namespace read from an ELMo tokens file (`read_elmo_vocab_file`'s rules, missing
    specials appended; a file of specials only is an error): index 0 is padding, line i -> index
    i + 1.

    # Parameters

    tokens_file : `str`
        The ELMo tokens file (`vocab.txt`), one token per line.
    namespace : `str`, optional (default = `"tokens"`)
        The namespace that receives the tokens.
    """

    @classmethod
    def from_elmo_tokens_file(cls, tokens_file: str, namespace: str = "tokens") -> "Vocabulary":
        vocab = cls()
        tokens = read_elmo_vocab_file(tokens_file)
        if not set(tokens) - set(SPECIALS):
            raise ConfigurationError(
                f"{tokens_file} holds no token but <S>, </S> and the unknown word: every word "
                "would be unknown"
            )
        tokens = with_specials(tokens, tokens_file)
        with tempfile.TemporaryDirectory() as folder:  # allennlp's public loader reads a file
            checked = os.path.join(folder, "tokens.txt")
            write_elmo_vocab_file(checked, tokens)
            vocab.set_from_file(checked, is_padded=True, namespace=namespace)
        return vocab
