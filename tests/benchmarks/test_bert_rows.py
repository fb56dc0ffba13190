"""The quality table's BERT rows on a tiny BERT: benchmarks/support/frozen_transformer_layers.py
against allennlp's own embedder, bert_mlm.py's vocabulary, blocks and pretraining, and both
rows' taggers trained by `allennlp train`."""

import argparse

import pytest
import torch
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import PretrainedTransformerMismatchedIndexer
from allennlp.modules.token_embedders import PretrainedTransformerMismatchedEmbedder
from transformers import BertForMaskedLM, BertModel

from benchmarks.quality_table import BERT_ROWS, Budget, downstream_params, train_downstream
from benchmarks.support import bert_mlm
from benchmarks.support.common import REPO_ROOT
from benchmarks.support.frozen_transformer_layers import FrozenTransformerMismatchedEmbedder
from tests.helpers import save_tiny_bert, warm_allennlp_env

TEXT = "the cat sat on the mat .\nthe dog sat on the log .\na cat and a dog met on a mat .\n"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return save_tiny_bert(TEXT * 20, tmp_path_factory.mktemp("bert"), hidden=16)


def batch(model_name: str, sentences: list[str]) -> dict:
    indexer = PretrainedTransformerMismatchedIndexer(model_name)
    vocab = Vocabulary()
    indexed = [indexer.tokens_to_indices([Token(w) for w in s.split()], vocab) for s in sentences]
    lengths = {k: max(len(i[k]) for i in indexed) for k in indexed[0]}
    padded = [indexer.as_padded_tensor_dict(i, lengths) for i in indexed]
    return {key: torch.stack([p[key] for p in padded]) for key in padded[0]}


def test_the_frozen_embedder_equals_allennlps_and_runs_the_transformer_once_per_sentence(
    tiny_bert,
):
    first = batch(tiny_bert, ["the cat sat on the mat .", "a dog met"])
    theirs = PretrainedTransformerMismatchedEmbedder(
        tiny_bert, train_parameters=False, last_layer_only=False
    )
    theirs._matched_embedder.eval_mode = True  # the matched embedder's option, not exposed
    ours = FrozenTransformerMismatchedEmbedder(tiny_bert)
    ours.load_state_dict(
        {
            k.replace("transformer_model.", "transformer_model.model."): v
            for k, v in theirs.state_dict().items()
        }
    )
    ours.train(), theirs.train()  # the transformer stays in eval mode, as allennlp's does
    calls = []
    ours._matched_embedder.transformer_model.model.register_forward_hook(
        lambda module, args, output: calls.append(1)
    )
    second = batch(tiny_bert, ["a dog met", "the log", "the cat sat on the mat ."])
    for tensors, runs in ((first, 1), (second, 2), (second, 2)):
        expected = theirs(**tensors)
        got = ours(**tensors)
        assert got.shape == expected.shape == (len(tensors["mask"]), tensors["mask"].size(1), 16)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        assert len(calls) == runs  # only "the log" was new in the second batch
    mix = [p for n, p in ours.named_parameters() if p.requires_grad]
    assert len(mix) == 3  # the scalar mix's two layer weights and gamma train, nothing else
    ours(**second).sum().backward()
    assert all(p.grad is not None for p in mix)


def test_wordpiece_blocks_are_full_and_framed(tiny_bert, tmp_path):
    from transformers import BertTokenizerFast

    tokenizer = BertTokenizerFast.from_pretrained(tiny_bert)
    text = tmp_path / "text.txt"
    text.write_text(TEXT * 30)
    data = bert_mlm.blocks(tokenizer, text)
    assert data.shape[1] == bert_mlm.BLOCK
    assert (data[:, 0] == tokenizer.cls_token_id).all()
    assert (data[:, -1] == tokenizer.sep_token_id).all()
    assert tokenizer.unk_token_id not in data.tolist()[0]


def test_bert_pretraining_lowers_the_validation_loss_and_keeps_the_best_epoch(tmp_path):
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    text = tmp_path / "text.txt"
    text.write_text(TEXT * 40)
    args = argparse.Namespace(
        train=text, valid=text, heldout=text, out=tmp_path, epochs=3, patience=1, seed=0
    )
    result = bert_mlm.pretrain(args)
    losses = result["validation_losses"]
    assert len(losses) == result["epochs_run"] == 3 and losses[-1] < losses[0]
    assert result["best_epoch"] == 1 + losses.index(min(losses))
    model = BertForMaskedLM.from_pretrained(result["model"])
    tokenizer = BertTokenizerFast.from_pretrained(result["model"])
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    heldout = bert_mlm.masked_loss(model, collator, bert_mlm.blocks(tokenizer, text))
    assert round(heldout, 4) == result["heldout_mlm_loss"]
    assert round(min(losses), 4) == result["heldout_mlm_loss"]  # the same text and masks


def bert_weights(state: dict) -> dict:
    """The transformer's own weights in a downstream model's state, by their BertModel name."""
    marker = "transformer_model."
    return {
        key.split(marker, 1)[1].removeprefix("model."): value
        for key, value in state.items()
        if marker in key
    }


@pytest.mark.parametrize("row", BERT_ROWS)
def test_the_bert_rows_train_a_tagger_through_allennlp_train(row, tiny_bert, tmp_path, monkeypatch):
    # `allennlp train` a fork of the tests' warm server (its client: no seconds of imports)
    for name, value in warm_allennlp_env(tmp_path / "bin").items():
        monkeypatch.setenv(name, value)
    tagged = REPO_ROOT / "fixtures" / "tagged"
    data = {"train": tagged / "train.conllu"}
    data["validation"] = data["test"] = tagged / "valid.conllu"
    budget = Budget(None, 8, [], 1, 1, 1, 2, 1)
    params = downstream_params(
        "upos", row, {"model": tiny_bert, "width": 16}, data, "train", 0, budget
    )
    result = train_downstream(params, "upos", tmp_path / row)
    assert 0.0 <= result["test"] <= 1.0 and result["epochs_run"] == 2
    trained = bert_weights(torch.load(tmp_path / row / "model" / "best.th", weights_only=True))
    pretrained = BertModel.from_pretrained(tiny_bert).state_dict()
    assert set(trained) == set(pretrained)
    saved = [key for key in pretrained if not key.startswith("pooler.")]  # a masked LM has none
    changed = {key for key in saved if not torch.equal(trained[key], pretrained[key])}
    assert changed == (set() if row == "bert_mlm_frozen" else set(saved))
