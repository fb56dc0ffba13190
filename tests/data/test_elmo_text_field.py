"""The fast data path (`elmo_corpus`'s ElmoTextField of strings + the bulk `elmo_char_ids`
indexer) gives the same batches as the plain one (TextField of Tokens + allennlp's indexers)."""

import copy
import pickle
from collections import Counter, defaultdict

import torch
from allennlp.data import Batch, Token, Vocabulary
from allennlp.data.data_loaders import MultiProcessDataLoader
from allennlp.data.fields import TextField
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer, SingleIdTokenIndexer
from allennlp.data.tokenizers import WhitespaceTokenizer

from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_text_field import ElmoTextField

LINES = [
    "the cat sat on the mat .",
    "Ünïcödé naïve café 日本語 🙂 👩‍👩‍👧 e\u0301",
    "x" * 70 + " " + "é" * 30 + " short " + "a" * 49,
    "<S> </S> @@UNKNOWN@@ @@PADDING@@ the",
    " ".join(f"w{i}" for i in range(23)),  # several windows
    "one",
]


class PlainWhitespaceTokenizer(WhitespaceTokenizer):
    """The same tokens, but not the exact whitespace tokenizer: the reader's plain path."""


def readers():
    fast = ElmoCorpusReader(max_sequence_length=5)
    plain = ElmoCorpusReader(
        tokenizer=PlainWhitespaceTokenizer(),
        token_indexers={"tokens": SingleIdTokenIndexer(), "elmo": ELMoTokenCharactersIndexer()},
        max_sequence_length=5,
    )
    return fast, plain


def vocabulary() -> Vocabulary:
    vocab = Vocabulary(non_padded_namespaces=[])
    vocab.add_tokens_to_namespace(["<S>", "</S>", "the", "cat", "café", "short", "one"], "tokens")
    return vocab


def test_fast_reader_gives_the_same_tokens_and_padded_batches_as_the_plain_path(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    fast, plain = readers()
    vocab = vocabulary()
    fast_instances, plain_instances = list(fast.read(str(corpus))), list(plain.read(str(corpus)))
    assert all(isinstance(i["source"], ElmoTextField) for i in fast_instances)
    assert all(type(i["source"]) is TextField for i in plain_instances)
    assert [[t.text for t in i["source"].tokens] for i in fast_instances] == [
        [t.text for t in i["source"].tokens] for i in plain_instances
    ]
    for size in (1, 3, len(fast_instances)):  # different padding lengths
        for start in range(0, len(fast_instances), size):
            batches = [
                Batch(instances[start : start + size])
                for instances in (fast_instances, plain_instances)
            ]
            for batch in batches:
                batch.index_instances(vocab)
            ours, theirs = (batch.as_tensor_dict()["source"] for batch in batches)
            assert ours.keys() == theirs.keys() == {"tokens", "elmo"}
            assert torch.equal(ours["tokens"]["tokens"], theirs["tokens"]["tokens"])
            assert ours["elmo"]["elmo_tokens"].dtype == torch.long
            assert torch.equal(ours["elmo"]["elmo_tokens"], theirs["elmo"]["elmo_tokens"])


def test_data_loader_batches_equal_with_worker_processes(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LINES * 3) + "\n", encoding="utf-8")
    vocab = vocabulary()
    batches = []
    for reader in readers():
        loader = MultiProcessDataLoader(
            reader, str(corpus), batch_size=4, num_workers=1, max_instances_in_memory=8
        )
        loader.index_with(vocab)
        batches.append(list(loader))
    assert len(batches[0]) == len(batches[1]) > 3
    for ours, theirs in zip(*batches, strict=True):
        assert torch.equal(ours["source"]["tokens"]["tokens"], theirs["source"]["tokens"]["tokens"])
        assert torch.equal(
            ours["source"]["elmo"]["elmo_tokens"], theirs["source"]["elmo"]["elmo_tokens"]
        )


def test_text_field_interface_on_strings():
    field = ElmoTextField(["<S>", "a", "é", "</S>"])
    assert len(field) == field.sequence_length() == 4
    assert field[2] == Token("é") and [t.text for t in field] == ["<S>", "a", "é", "</S>"]
    assert field.human_readable_repr() == ["<S>", "a", "é", "</S>"]
    vocab = vocabulary()
    field.token_indexers = {"tokens": SingleIdTokenIndexer()}
    counter = defaultdict(Counter)
    field.count_vocab_items(counter)
    assert counter["tokens"] == {"<S>": 1, "a": 1, "é": 1, "</S>": 1}
    field.index(vocab)
    assert field.as_tensor(field.get_padding_lengths())["tokens"]["tokens"].tolist() == [
        vocab.get_token_index(t) for t in ["<S>", "a", "é", "</S>"]
    ]


def test_pickled_and_copied_field_keeps_its_strings_and_indexed_ids():
    field = ElmoTextField(["<S>", "the", "cat", "</S>"], {"tokens": SingleIdTokenIndexer()})
    field.index(vocabulary())
    for twin in (pickle.loads(pickle.dumps(field)), copy.deepcopy(field)):
        assert isinstance(twin, ElmoTextField) and twin.texts == field.texts
        lengths = field.get_padding_lengths()
        assert torch.equal(
            twin.as_tensor(lengths)["tokens"]["tokens"],
            field.as_tensor(lengths)["tokens"]["tokens"],
        )
