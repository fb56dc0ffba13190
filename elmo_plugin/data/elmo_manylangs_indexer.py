"""TokenIndexer `elmo_manylangs_ids`: the word and character ids of an ELMoForManyLangs model
(HIT-SCIR), read from its dictionaries as they are recorded in the vocabulary."""

from typing import Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import pad_sequence_to_length
from allennlp.data.token_indexers.token_indexer import IndexedTokenList, TokenIndexer
from allennlp.data.tokenizers import Token
from allennlp.data.vocabulary import DEFAULT_PADDING_TOKEN, Vocabulary

DEFAULT_NAMESPACE = "elmo_manylangs"
# The specials of its dictionaries.
OOV, PAD, BOW, EOW, BOS, EOS = "<oov>", "<pad>", "<bow>", "<eow>", "<bos>", "<eos>"


def chars_namespace(namespace: str) -> str:
    return f"{namespace}_chars"


def words_namespace(namespace: str) -> str:
    return f"{namespace}_words"


def recorded_dictionary(vocab: Vocabulary, namespace: str) -> Optional[dict[str, int]]:
    """The dictionary recorded in a namespace (token -> its id in the model), or None.
    allennlp's padding and OOV tokens lead a padded namespace; the ids count from the first token
    after them."""
    token_to_index = vocab.get_token_to_index_vocabulary(namespace)
    offset = 2 if token_to_index.get(DEFAULT_PADDING_TOKEN) == 0 else 0
    dictionary = {
        token: index - offset for token, index in token_to_index.items() if index >= offset
    }
    return dictionary or None


def record_dictionary(
    vocab: Vocabulary, namespace: str, dictionary: dict[str, int], source: str
) -> None:
    """Adds the dictionary (ids 0..n-1) to an empty namespace, in id order; checks it against
    one already recorded."""
    recorded = recorded_dictionary(vocab, namespace)
    if recorded is None:
        vocab.add_tokens_to_namespace(sorted(dictionary, key=dictionary.__getitem__), namespace)
    elif recorded != dictionary:
        raise ConfigurationError(
            f"{source}: its dictionary differs from the one recorded in vocabulary namespace "
            f"{namespace!r}"
        )


def record_dictionaries(
    vocab: Vocabulary,
    namespace: str,
    chars: dict[str, int],
    words: Optional[dict[str, int]],
    source: str,
) -> None:
    """A model's char and word (if any) dictionaries into `<namespace>_chars` / `_words`."""
    record_dictionary(vocab, chars_namespace(namespace), chars, source)
    if words is not None:
        record_dictionary(vocab, words_namespace(namespace), words, source)


def vocabulary_dictionaries(
    vocab: Vocabulary, namespace: str, with_words: bool
) -> tuple[dict[str, int], Optional[dict[str, int]]]:
    """(chars, words or None) recorded in the vocabulary; a clear error when missing."""
    chars = recorded_dictionary(vocab, chars_namespace(namespace))
    words = recorded_dictionary(vocab, words_namespace(namespace)) if with_words else None
    if chars is None or (with_words and words is None):
        raise ConfigurationError(
            "the vocabulary has no ELMoForManyLangs dictionaries in namespaces "
            f"{chars_namespace(namespace)!r} / {words_namespace(namespace)!r}: an "
            "elmo_bilm_embedder with an ELMoForManyLangs pretrained_file, or the elmo_manylangs "
            "vocabulary, records them"
        )
    return chars, words


def boundary_ids(
    chars: dict[str, int], words: Optional[dict[str, int]], max_chars: int
) -> dict[str, list[int]]:
    """The indexed `<bos>` and `<eos>` tokens (see `ElmoManyLangsIndexer`)."""
    return {name: token_ids(name, chars, words, max_chars) for name in (BOS, EOS)}


def token_ids(
    text: str, chars: dict[str, int], words: Optional[dict[str, int]], max_chars: int
) -> list[int]:
    """One token as ELMoForManyLangs' `Embedder` batches it, every id + 1 (0 = padding token):
    [word id, char ids (max_chars)]. Its quirks, kept: the token is cut to max_chars - 2
    characters before the word lookup; the characters are framed by the id of `<eow>` first and
    of `<bow>` last (its batching code swaps them); `<bos>` / `<eos>` are the characters
    [`<eow>`, the token's own entry, `<bow>`] (also where the text holds such a token). No word
    dictionary: the word id is 0 (+ 1)."""
    text = text[: max_chars - 2]
    word = 0 if words is None else words.get(text, words[OOV])
    if text in (BOS, EOS):
        characters = [chars[text]]
    else:
        characters = [chars.get(character, chars[OOV]) for character in text]
    ids = [chars[EOW], *characters, chars[BOW]]
    ids += [chars[PAD]] * (max_chars - len(ids))
    return [index + 1 for index in [word, *ids]]


@TokenIndexer.register("elmo_manylangs_ids")
class ElmoManyLangsIndexer(TokenIndexer):
    """
    Tokens -> (tokens, 1 + max_characters_per_token) ids of an ELMoForManyLangs model, under the
    key `elmo_tokens` (read by `elmo_bilm_embedder`): column 0 the word id, the others the
    character ids, all + 1 so that 0 marks a padding token.

    The dictionaries are not read from files here: `elmo_bilm_embedder` records the model's
    `char.dic` / `word.dic` in the vocabulary namespaces `<namespace>_chars` / `<namespace>_words`
    when it loads the model folder (the `elmo_manylangs` vocabulary does for continued
    pretraining), so a `model.tar.gz` carries them.

    Each distinct token's ids are computed once.

    # Parameters

    namespace : `str`, optional (default = `"elmo_manylangs"`)
        The prefix of the vocabulary namespaces that hold the dictionaries.
    max_characters_per_token : `int`, optional (default = `50`)
        The model's `max_chars` (its config's `token_embedder.max_characters_per_token`).
    sentence_boundary_tokens : `Tuple[str, str]`, optional (default = `None`)
        Two token texts indexed as `<bos>` and `<eos>` (the `<S>` and `</S>` that the
        `elmo_corpus` reader adds, for continued pretraining).
    cache_size : `int`, optional (default = `1_000_000`)
        The most distinct tokens whose ids are kept.
    token_min_padding_length : `int`, optional (default = `0`)
        `TokenIndexer`'s: the fewest tokens a padded field has.
    """

    def __init__(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        max_characters_per_token: int = 50,
        sentence_boundary_tokens: Optional[tuple[str, str]] = None,
        cache_size: int = 1_000_000,
        token_min_padding_length: int = 0,
    ) -> None:
        super().__init__(token_min_padding_length)
        self._cache_size = cache_size
        self.namespace = namespace
        self.max_characters_per_token = max_characters_per_token
        boundaries = tuple(sentence_boundary_tokens or ())
        if boundaries and len(boundaries) != 2:
            raise ConfigurationError(
                "elmo_manylangs_ids: sentence_boundary_tokens must be two token texts (for <bos> "
                f"and <eos>), got {list(boundaries)}"
            )
        self._boundaries = dict(zip(boundaries, (BOS, EOS), strict=True)) if boundaries else {}
        self._cache: dict[str, list[int]] = {}
        self._vocab_id: Optional[int] = None  # the vocabulary the cache was built with

    def count_vocab_items(self, token: Token, counter: dict[str, dict[str, int]]) -> None:
        pass

    def tokens_to_indices(self, tokens: list[Token], vocabulary: Vocabulary) -> IndexedTokenList:
        if self._vocab_id != id(vocabulary):
            self._cache, self._vocab_id = {}, id(vocabulary)
            self._chars, _ = vocabulary_dictionaries(vocabulary, self.namespace, with_words=False)
            self._words = recorded_dictionary(vocabulary, words_namespace(self.namespace))
        indexed = []
        for token in tokens:
            text = self._boundaries.get(token.ensure_text(), token.ensure_text())
            ids = self._cache.get(text)
            if ids is None:
                ids = token_ids(text, self._chars, self._words, self.max_characters_per_token)
                if len(self._cache) < self._cache_size:
                    self._cache[text] = ids
            indexed.append(ids)
        return {"elmo_tokens": indexed}

    def get_empty_token_list(self) -> IndexedTokenList:
        return {"elmo_tokens": []}

    def as_padded_tensor_dict(
        self, tokens: IndexedTokenList, padding_lengths: dict[str, int]
    ) -> dict[str, torch.Tensor]:
        width = 1 + self.max_characters_per_token
        padded = pad_sequence_to_length(
            tokens["elmo_tokens"], padding_lengths["elmo_tokens"], lambda: [0] * width
        )
        return {"elmo_tokens": torch.tensor(padded, dtype=torch.long)}

    def __getstate__(self):
        state = dict(self.__dict__)
        state.update(_cache={}, _vocab_id=None)
        return state
