"""`conllu_tagging`: syntactic words and UPOS only; multiword tokens, empty nodes, comments
skipped."""

import gzip
import logging

import pytest
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.data import DatasetReader, Vocabulary
from allennlp.data.batch import Batch

import elmo_plugin  # noqa: F401  (registers every component)
from tests.helpers import REPO_ROOT

CONLLU = """\
# sent_id = 1
# text = Don't stop.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t_\t_
3\tstop\tstop\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = 2
# a second comment line
1\tSue\tSue\tPROPN\tNNP\t_\t2\tnsubj\t_\t_
2\tlikes\tlike\tVERB\tVBZ\t_\t0\troot\t_\t_
2.1\tlikes\tlike\tVERB\tVBZ\t_\t_\t_\t3:conj\tCopyOf=2
3\tcoffee\tcoffee\tNOUN\tNN\t_\t2\tobj\t_\t_
4-5\tdel\t_\t_\t_\t_\t_\t_\t_\t_
4\tde\tde\tADP\tIN\t_\t5\tcase\t_\t_
5\tel\tel\tDET\tDT\t_\t3\tnmod\t_\t_
"""


@pytest.fixture
def conllu_file(tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    return path


def read(params, path):
    reader = DatasetReader.from_params(Params(params))
    return reader, list(reader.read(str(path)))


def test_words_and_upos_without_multiword_tokens_empty_nodes_or_comments(conllu_file):
    _, instances = read({"type": "conllu_tagging"}, conllu_file)
    assert [[t.text for t in i["tokens"].tokens] for i in instances] == [
        ["Do", "n't", "stop", "."],
        ["Sue", "likes", "coffee", "de", "el"],
    ]
    assert [i["tags"].labels for i in instances] == [
        ["AUX", "PART", "VERB", "PUNCT"],
        ["PROPN", "VERB", "NOUN", "ADP", "DET"],
    ]
    assert instances[1]["metadata"]["words"] == ["Sue", "likes", "coffee", "de", "el"]


def test_read_is_lazy(tmp_path, monkeypatch):
    """The first sentence comes out after a small part of a large file has been read."""
    import elmo_plugin.data.conllu_tagging_reader as module

    path = tmp_path / "big.conllu"
    path.write_text(CONLLU * 2000, encoding="utf-8")
    opened = []

    def recording_open(*args, **kwargs):
        opened.append(open(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(module, "open", recording_open, raising=False)  # shadows the builtin there
    reader = DatasetReader.from_params(Params({"type": "conllu_tagging"}))
    instances = iter(reader.read(str(path)))  # kept: dropping the generator closes the file
    assert next(instances)["tags"].labels == ["AUX", "PART", "VERB", "PUNCT"]
    assert len(opened) == 1 and opened[0].tell() < path.stat().st_size / 10


def test_configured_indexers_give_word_ids_and_elmo_character_ids(conllu_file):
    reader, instances = read(
        {
            "type": "conllu_tagging",
            "token_indexers": {"tokens": {"type": "single_id"}, "elmo": {"type": "elmo_char_ids"}},
        },
        conllu_file,
    )
    vocab = Vocabulary.from_instances(instances)
    for instance in instances:
        reader.apply_token_indexers(instance)
    batch = Batch(instances)
    batch.index_instances(vocab)
    tensors = batch.as_tensor_dict()
    assert tensors["tokens"]["elmo"]["elmo_tokens"].shape == (2, 5, 50)
    assert tensors["tokens"]["tokens"]["tokens"][0].tolist()[:4] == [
        vocab.get_token_index(word) for word in ["Do", "n't", "stop", "."]
    ]
    assert tensors["tags"][1].tolist() == [
        vocab.get_token_index(t, "labels") for t in ["PROPN", "VERB", "NOUN", "ADP", "DET"]
    ]
    # "Do" is 'D','o' between begin/end-of-word marks, ids shifted by one as allennlp's ELMo
    # mapper does.
    assert tensors["tokens"]["elmo"]["elmo_tokens"][0, 0, :4].tolist() == [
        259,
        ord("D") + 1,
        ord("o") + 1,
        260,
    ]


def test_text_to_instance_with_and_without_tags():
    reader = DatasetReader.from_params(Params({"type": "conllu_tagging"}))
    untagged = reader.text_to_instance(["a", "file"])
    assert "tags" not in untagged.fields and [t.text for t in untagged["tokens"].tokens] == [
        "a",
        "file",
    ]
    assert reader.text_to_instance(["a", "file"], ["DET", "NOUN"])["tags"].labels == ["DET", "NOUN"]
    with pytest.raises(ConfigurationError, match="1 tags for 2 tokens"):
        reader.text_to_instance(["a", "file"], ["DET"])


def test_missing_file_error_names_it(tmp_path):
    reader = DatasetReader.from_params(Params({"type": "conllu_tagging"}))
    missing = tmp_path / "nope.conllu"
    with pytest.raises(ConfigurationError, match="nope.conllu"):
        list(reader.read(str(missing)))


@pytest.mark.parametrize(
    "raw",
    [gzip.compress(CONLLU.encode("utf-8") * 20, mtime=0), CONLLU.encode("utf-16-le")],
    ids=["gzip", "utf-16"],
)
def test_a_file_that_is_not_text_is_an_error_naming_the_reader_and_file(tmp_path, raw):
    path = tmp_path / "train.conllu"
    path.write_bytes(raw)
    reader = DatasetReader.from_params(Params({"type": "conllu_tagging"}))
    with pytest.raises(ConfigurationError, match=f"^conllu_tagging: {path} is not text .*iconv"):
        list(reader.read(str(path)))


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ("x\tSue\tSue\tPROPN\tNNP\t_\t2\tnsubj\t_\t_", "Failed parsing field 'id'"),
        ("1\tSue", "2 columns, a CoNLL-U word needs 10"),
    ],
    ids=["bad-id", "two-columns"],
)
def test_a_malformed_row_is_an_error_naming_file_and_line(tmp_path, bad_row, message):
    lines = CONLLU.splitlines()
    row = lines.index("1\tSue\tSue\tPROPN\tNNP\t_\t2\tnsubj\t_\t_")
    lines[row] = bad_row
    path = tmp_path / "bad.conllu"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    reader = DatasetReader.from_params(Params({"type": "conllu_tagging"}))
    with pytest.raises(ConfigurationError, match=f"^conllu_tagging: {path}:{row + 1}: {message}"):
        list(reader.read(str(path)))


def test_bundled_fixture_counts():
    reader = DatasetReader.from_params(Params({"type": "conllu_tagging"}))
    train = list(reader.read(str(REPO_ROOT / "fixtures/tagged/train.conllu")))
    valid = list(reader.read(str(REPO_ROOT / "fixtures/tagged/valid.conllu")))
    assert (len(train), len(valid)) == (400, 100)
    tags = {tag for instance in train for tag in instance["tags"].labels}
    assert {"DET", "NOUN", "VERB", "AUX", "ADJ", "ADP", "PRON", "PUNCT"} <= tags


def test_invalid_utf8_is_replaced_with_warnings_naming_file_line_and_a_count(tmp_path, caplog):
    """Seven bad lines: the first five named file:line, all seven counted; nothing else lost."""
    sentence = (
        "1\tcaf\xc3\tcafe\tNOUN\tNN\t_\t0\troot\t_\t_\n2\tok\tok\tADJ\tJJ\t_\t1\tamod\t_\t_\n"
    )
    bad = b"".join(
        sentence.encode("utf-8").replace("\xc3".encode(), b"\xc3") + b"\n" for _ in range(7)
    )
    path = tmp_path / "bad.conllu"
    path.write_bytes(CONLLU.encode("utf-8") + b"\n" + bad)
    with caplog.at_level(logging.WARNING):
        _, instances = read({"type": "conllu_tagging"}, path)
    words = [[t.text for t in i["tokens"].tokens] for i in instances]
    assert len(words) == 2 + 7 and words[2:] == [["caf\ufffd", "ok"]] * 7
    messages = [record.getMessage() for record in caplog.records]
    first_bad = CONLLU.count("\n") + 2  # line numbers of the bad lines: every third from here
    named = [f"invalid UTF-8 at {path}:{first_bad + 3 * k}, replaced" for k in range(7)]
    assert [name for name in named if any(name in m for m in messages)] == named[:5]
    assert f"conllu_tagging: 7 lines of {path} had invalid UTF-8 (replaced with U+FFFD)" in messages
