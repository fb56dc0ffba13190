"""`whitespace_tagger` through `allennlp predict` on a trained ELMo tagger archive."""

import json

import pytest
from allennlp.common.checks import ConfigurationError
from allennlp.predictors import Predictor
from conllu import parse_incr

from tests.helpers import REPO_ROOT, predict, predict_args, run_allennlp


def test_tags_whitespace_sentences_and_token_lists(
    tiny_elmo_tagger_archive, tiny_tagged_data, plugin_cwd
):
    with open(tiny_tagged_data / "valid.conllu", encoding="utf-8") as conllu:
        gold = [([w["form"] for w in s], [w["upos"] for w in s]) for s in parse_incr(conllu)]
    inputs = [
        {"sentence": " ".join(words)} if i % 2 else {"tokens": words}
        for i, (words, _) in enumerate(gold)
    ]
    inputs.append({"sentence": "  ".join(gold[0][0]) + " "})  # the first again, odd spacing
    outputs = predict(tiny_elmo_tagger_archive, plugin_cwd, inputs, "whitespace_tagger", 4)
    assert len(outputs) == len(gold) + 1
    correct = total = 0
    for (words, tags), output in zip(gold, outputs[:-1], strict=True):  # the last: checked below
        assert output["words"] == words and len(output["tags"]) == len(words)
        correct += sum(p == g for p, g in zip(output["tags"], tags, strict=True))
        total += len(tags)
    assert correct / total > 0.9  # the archive's validation accuracy is ~0.99
    assert outputs[-1]["words"] == outputs[0]["words"] and outputs[-1]["tags"] == outputs[0]["tags"]


def test_biLM_predictors_refuse_a_tagger_archive(tiny_elmo_tagger_archive):
    for name in ("elmo_embeddings", "elmo_lm_scorer"):
        with pytest.raises(
            ConfigurationError, match="needs an ELMo biLM archive .* holds a CrfTagger"
        ):
            Predictor.from_path(str(tiny_elmo_tagger_archive), name)


def test_whitespace_tagger_refuses_a_bilm_archive_naming_the_predictors_that_take_it(plugin_cwd):
    archive = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"
    args = predict_args(archive, plugin_cwd, '{"sentence": "a b"}\n', "whitespace_tagger")
    result = run_allennlp(args, plugin_cwd, check=False)
    assert result.returncode == 1 and "AttributeError" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "allennlp.common.checks.ConfigurationError: whitespace_tagger needs a tagger archive but "
        "this archive holds a ElmoLanguageModel model, a language model: predict with "
        "elmo_embeddings or elmo_lm_scorer"
    )
    assert not (plugin_cwd / "out.jsonl").exists()


def test_a_sentence_of_no_tokens_gets_empty_outputs_and_the_others_their_tags(plugin_cwd):
    """Through `allennlp predict`: an empty sentence beside a real one in a batch, and a batch of
    empty ones only; the real sentence is tagged as the archive tagged it alone."""
    fixtures = REPO_ROOT / "fixtures" / "archives_before_layering"
    sentence = json.loads((fixtures / "sentences.jsonl").read_text().splitlines()[0])
    alone = json.loads((fixtures / "tagger.predictions.jsonl").read_text().splitlines()[0])
    inputs = [{"sentence": ""}, sentence, {"sentence": "   "}, {"tokens": []}]
    outputs = predict(fixtures / "tagger.tar.gz", plugin_cwd, inputs, "whitespace_tagger")
    empty = {"words": [], "tags": [], "logits": [], "mask": []}
    assert outputs[0] == outputs[2] == outputs[3] == empty
    assert outputs[1].keys() == empty.keys()
    assert outputs[1]["tags"] == alone["tags"] and outputs[1]["words"] == alone["words"]
