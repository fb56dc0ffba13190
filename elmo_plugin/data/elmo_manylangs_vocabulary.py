"""Vocabulary `elmo_manylangs`: allennlp's `from_instances` plus an ELMoForManyLangs model's
dictionaries, for continued pretraining of that model."""

from collections.abc import Iterable
from typing import Any, Optional, Union

from allennlp.data import Instance
from allennlp.data.vocabulary import Vocabulary

from elmo_plugin.data.elmo_manylangs_files import model_config, read_dictionaries
from elmo_plugin.data.elmo_manylangs_indexer import DEFAULT_NAMESPACE, record_dictionaries


@Vocabulary.register("elmo_manylangs", constructor="from_instances_and_model_folder")
class ElmoManyLangsVocabulary(Vocabulary):
    """The instances' namespaces (`tokens`: the softmax vocabulary, counted with `min_count` /
    `max_vocab_size`), and `model_folder`'s `char.dic` / `word.dic` in the namespaces
    `<namespace>_chars` / `<namespace>_words`, where `elmo_manylangs_ids` and
    `elmo_manylangs_cnn` read them (and the archive keeps them).

    # Parameters

    model_folder : `str`
        The ELMoForManyLangs model folder whose `char.dic` (and `word.dic`) are recorded.
    min_count : `Dict[str, int]`, optional (default = `None`)
        `from_instances`'s: the fewest occurrences a token needs, per namespace.
    max_vocab_size : `Union[int, Dict[str, int]]`, optional (default = `None`)
        `from_instances`'s: the most tokens kept, in all namespaces or per namespace.
    namespace : `str`, optional (default = `"elmo_manylangs"`)
        The namespace prefix, the same as the `elmo_manylangs_ids` indexer's.
    **kwargs
        `from_instances`'s other keys (`pretrained_files`, `non_padded_namespaces`, ...).
    """

    @classmethod
    def from_instances_and_model_folder(
        cls,
        model_folder: str,
        instances: Optional[Iterable[Instance]] = None,
        min_count: Optional[dict[str, int]] = None,
        max_vocab_size: Union[int, dict[str, int], None] = None,
        namespace: str = DEFAULT_NAMESPACE,
        **kwargs: Any,
    ) -> "Vocabulary":
        # (a dict: allennlp annotates these two None defaults without Optional)
        counts: dict[str, Any] = {"min_count": min_count, "max_vocab_size": max_vocab_size}
        vocab = Vocabulary.from_instances(instances or [], **counts, **kwargs)
        chars, words = read_dictionaries(model_folder, model_config(model_folder))
        record_dictionaries(vocab, namespace, chars, words, model_folder)
        return vocab
