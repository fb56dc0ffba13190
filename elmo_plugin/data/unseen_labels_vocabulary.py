"""Vocabulary `unseen_labels_as_errors`: allennlp's vocabulary, except that a label the training
data never had (a UD relation or tag that only the test file holds) is scored as an error with a
counted warning, instead of ending `allennlp evaluate` / `predict` with a KeyError."""

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any, Optional, Union

from allennlp.data.instance import Instance
from allennlp.data.vocabulary import (
    DEFAULT_NON_PADDED_NAMESPACES,
    DEFAULT_OOV_TOKEN,
    DEFAULT_PADDING_TOKEN,
    Vocabulary,
)

logger = logging.getLogger(__name__)


@Vocabulary.register("unseen_labels_as_errors", constructor="from_instances")
class UnseenLabelsAsErrors(Vocabulary):
    """
    Every non-padded namespace (labels: by default those matching `*tags` and `*labels`) gets
    allennlp's OOV token as its last entry: a model has one label more, which no training
    example carries, so a gold label unseen in training maps there and never matches a
    prediction. Each such label is counted and logged as a warning on its 1st, 10th, 100th, ...
    occurrence; `allennlp evaluate` with the `elmo_evaluator` logs the total of each evaluation
    file in one more warning (`take_unseen_labels_summary`). Archives keep the extra entry in
    their vocabulary files, so `allennlp evaluate` and `predict` behave the same.

    # Parameters

    The same keys as allennlp's `from_instances` vocabulary (`min_count`, `max_vocab_size`,
    `non_padded_namespaces`, `pretrained_files`, `only_include_pretrained_words`,
    `tokens_to_add`, `min_pretrained_embeddings`, `padding_token`, `oov_token`).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.unseen_labels: Counter = Counter()  # (namespace, label) -> occurrences

    @classmethod
    def from_instances(
        cls,
        instances: Iterable[Instance],
        min_count: Optional[dict[str, int]] = None,
        max_vocab_size: Union[int, dict[str, int], None] = None,
        non_padded_namespaces: Iterable[str] = DEFAULT_NON_PADDED_NAMESPACES,
        pretrained_files: Optional[dict[str, str]] = None,
        only_include_pretrained_words: bool = False,
        tokens_to_add: Optional[dict[str, list[str]]] = None,
        min_pretrained_embeddings: Optional[dict[str, int]] = None,
        padding_token: Optional[str] = DEFAULT_PADDING_TOKEN,
        oov_token: Optional[str] = DEFAULT_OOV_TOKEN,
    ) -> "Vocabulary":
        # allennlp annotates these None defaults without Optional: passed through untyped
        settings: dict[str, Any] = dict(
            min_count=min_count,
            max_vocab_size=max_vocab_size,
            non_padded_namespaces=non_padded_namespaces,
            pretrained_files=pretrained_files,
            only_include_pretrained_words=only_include_pretrained_words,
            tokens_to_add=tokens_to_add,
            min_pretrained_embeddings=min_pretrained_embeddings,
            padding_token=padding_token,
            oov_token=oov_token,
        )
        vocab = super().from_instances(instances, **settings)
        for namespace in vocab.get_namespaces():
            if not vocab.is_padded(namespace):
                vocab.add_token_to_namespace(vocab._oov_token, namespace)
        return vocab

    def get_token_index(self, token: str, namespace: str = "tokens") -> int:
        indices = self._token_to_index[namespace]
        if token in indices or self._oov_token not in indices or self.is_padded(namespace):
            return super().get_token_index(token, namespace)
        self.unseen_labels[namespace, token] += 1
        count = self.unseen_labels[namespace, token]
        if str(count).strip("0") == "1":  # 1, 10, 100, ...
            logger.warning(
                "label %r is not in the training vocabulary's namespace %r: scored as an error "
                "(%d occurrence%s so far)",
                token,
                namespace,
                count,
                "" if count == 1 else "s",
            )
        return indices[self._oov_token]

    def take_unseen_labels_summary(self) -> Optional[str]:
        """One line with the total of gold labels unseen in training, by namespace and label,
        counted since the last call (None if there were none); the counts start again."""
        if not self.unseen_labels:
            return None
        total = sum(self.unseen_labels.values())
        by_label = ", ".join(
            f"{label!r} in {namespace!r} x{count}"
            for (namespace, label), count in self.unseen_labels.most_common()
        )
        self.unseen_labels.clear()
        return f"{total} gold labels not in the training vocabulary, scored as errors: {by_label}"
