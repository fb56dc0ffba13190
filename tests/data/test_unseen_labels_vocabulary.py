"""Vocabulary `unseen_labels_as_errors`: a label absent from training maps to an extra entry that
no prediction matches, with a counted warning; everything else is allennlp's vocabulary."""

import logging

import pytest
from allennlp.common import Params
from allennlp.data import Instance, Token
from allennlp.data.fields import SequenceLabelField, TextField
from allennlp.data.token_indexers import SingleIdTokenIndexer
from allennlp.data.vocabulary import DEFAULT_OOV_TOKEN, Vocabulary

from elmo_plugin.data.unseen_labels_vocabulary import UnseenLabelsAsErrors


def tagged(words: list[str], tags: list[str]) -> Instance:
    text = TextField([Token(word) for word in words], {"tokens": SingleIdTokenIndexer()})
    return Instance({"tokens": text, "tags": SequenceLabelField(tags, text, "labels")})


def built(instances: list[Instance]) -> Vocabulary:
    return Vocabulary.from_params(Params({"type": "unseen_labels_as_errors"}), instances=instances)


TRAIN = [tagged(["a", "dog"], ["DET", "NOUN"]), tagged(["the", "cat"], ["DET", "NOUN"])]


def test_label_namespaces_get_one_extra_entry_after_allennlps_own():
    vocab = built(TRAIN)
    plain = Vocabulary.from_instances(TRAIN)
    assert isinstance(vocab, UnseenLabelsAsErrors)
    assert plain.get_index_to_token_vocabulary("labels") == {0: "DET", 1: "NOUN"}
    assert vocab.get_index_to_token_vocabulary("labels") == {
        0: "DET",
        1: "NOUN",
        2: DEFAULT_OOV_TOKEN,
    }
    # padded namespaces (words) are allennlp's, unknown words are not labels and not counted
    tokens = plain.get_token_to_index_vocabulary("tokens")
    assert vocab.get_token_to_index_vocabulary("tokens") == tokens
    assert vocab.get_token_index("zebra", "tokens") == 1 and not vocab.unseen_labels


def test_an_unseen_label_is_indexed_as_the_extra_entry_with_a_counted_warning(caplog):
    vocab = built(TRAIN)
    with caplog.at_level(logging.WARNING, logger="elmo_plugin.data.unseen_labels_vocabulary"):
        indices = [vocab.get_token_index("csubj:pass", "labels") for _ in range(12)]
    assert indices == [2] * 12
    assert vocab.get_token_index("NOUN", "labels") == 1
    assert vocab.unseen_labels == {("labels", "csubj:pass"): 12}
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2  # the 1st and the 10th occurrence
    assert "'csubj:pass'" in warnings[0] and "'labels'" in warnings[0]
    assert "(1 occurrence so far)" in warnings[0] and "(10 occurrences so far)" in warnings[1]


def test_the_extra_entry_survives_the_vocabulary_files_an_archive_holds(tmp_path):
    built(TRAIN).save_to_files(str(tmp_path))
    # allennlp's archive loader: the config's type names the class, whose from_files reads them
    vocab_class, _ = Vocabulary.resolve_class_name("unseen_labels_as_errors")
    loaded = vocab_class.from_files(str(tmp_path))
    assert isinstance(loaded, UnseenLabelsAsErrors)
    assert loaded.get_token_index("INTJ", "labels") == 2
    assert loaded.unseen_labels == {("labels", "INTJ"): 1}


def test_allennlps_default_vocabulary_still_stops_on_an_unseen_label():
    with pytest.raises(KeyError):
        Vocabulary.from_instances(TRAIN).get_token_index("INTJ", "labels")


def test_the_summary_gives_the_total_by_label_and_starts_the_count_again():
    vocab = built(TRAIN)
    assert vocab.take_unseen_labels_summary() is None
    for label, times in (("INTJ", 3), ("csubj:pass", 12)):
        for _ in range(times):
            vocab.get_token_index(label, "labels")
    assert vocab.take_unseen_labels_summary() == (
        "15 gold labels not in the training vocabulary, scored as errors: "
        "'csubj:pass' in 'labels' x12, 'INTJ' in 'labels' x3"
    )
    assert vocab.take_unseen_labels_summary() is None
    vocab.get_token_index("INTJ", "labels")
    assert vocab.unseen_labels == {("labels", "INTJ"): 1}
