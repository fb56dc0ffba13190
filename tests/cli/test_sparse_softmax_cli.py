"""The original configs' sparse softmax through `allennlp train`: DDP with 2 CPU processes
trains exactly as one process does on the same global batches; the transformer's fused_adam
trains it; export and the embedder read its layout."""

import json

import pytest
import torch
from allennlp.common import Params
from allennlp.data import Vocabulary
from allennlp.models import Model
from allennlp.models.archival import load_archive
from allennlp.modules.elmo import batch_to_ids

from elmo_plugin.elmo_files.pretrained import load_pretrained_files
from elmo_plugin.elmo_files.softmax import read_softmax
from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder
from tests.elmo_files.elmo_reference import TOLERANCE, max_diff, with_boundaries
from tests.helpers import (
    CONFIG_DIR,
    evaluation,
    free_port,
    run_allennlp,
    run_allennlp_in_process,
    train_args,
)
from tests.training.test_tensorboard_callbacks import read_scalars

# elmo_lstm_original.jsonnet shrunk, on the CPU, without dropout, sequential reading.
TINY_ORIGINAL = {
    "model.text_field_embedder.token_embedders.elmo.filters": [[1, 4], [2, 4], [3, 8]],
    "model.text_field_embedder.token_embedders.elmo.projection_dim": 8,
    "model.contextualizer.input_dim": 8,
    "model.contextualizer.dropout": 0.0,
    "model.dropout": 0.0,
    "model.num_samples": 20,
    "vocabulary.min_count.tokens": 1,
    "data_loader.shuffle": False,
    "data_loader.num_workers": 0,
    "trainer.cuda_device": -1,
    # TensorBoard's parameter / gradient statistics and gradient norm at every batch
    "trainer.callbacks": [
        {"type": "tensorboard", "summary_interval": 1, "should_log_parameter_statistics": True}
    ],
}


@pytest.fixture(scope="module")
def equal_length_corpus(tmp_path_factory):
    """64 lines of 8 tokens each: every batch of 8 lines holds the same number of targets, so
    DDP's mean of per-process mean losses is the mean over the global batch."""
    folder = tmp_path_factory.mktemp("equal_lines")
    words = [f"w{index}" for index in range(60)]
    lines = [
        " ".join(words[(7 * line + 3 * position) % 60] for position in range(8))
        for line in range(64)
    ]
    (folder / "train.txt").write_text("\n".join(lines) + "\n")
    (folder / "valid.txt").write_text("\n".join(lines[:8]) + "\n")
    return folder


def train(config: str, corpus, out, **values) -> dict:
    """`allennlp train CONFIG` at tiny sizes (in this process; distributed: a process of its own)
    -> the trained model's state dict."""
    values = dict(
        TINY_ORIGINAL,
        train_data_path=str(corpus / "train.txt"),
        validation_data_path=str(corpus / "valid.txt"),
        **values,
    )
    run = run_allennlp if "distributed" in values else run_allennlp_in_process
    run(train_args(CONFIG_DIR / config, out, values))
    return torch.load(out / "best.th")


@pytest.fixture(scope="module")
def one_and_two_processes(equal_length_corpus, tmp_path_factory):
    """elmo_lstm_original.jsonnet (sparse softmax, Adagrad), 4 steps with gradient-norm clipping
    that bites: 1 process x 16 lines per step, and 2 gloo processes x 8 lines -> their folders."""
    root = tmp_path_factory.mktemp("sparse_ddp")
    common = {
        "model.contextualizer.cell_size": 16,
        "trainer.num_epochs": 1,
        "trainer.grad_norm": 0.1,
    }
    train(
        "elmo_lstm_original.jsonnet",
        equal_length_corpus,
        root / "one",
        **common,
        **{"data_loader.batch_size": 16},
    )
    train(
        "elmo_lstm_original.jsonnet",
        equal_length_corpus,
        root / "two",
        **common,
        **{"data_loader.batch_size": 8},
        distributed={"cuda_devices": [-1, -1], "master_port": free_port()},
    )
    return root / "one", root / "two"


def test_two_ddp_processes_train_the_sparse_softmax_as_one_process_on_the_same_global_batch(
    one_and_two_processes,
):
    """Every parameter equal to float tolerance, the sparse softmax (whose gradients are gathered
    outside DDP's all-reduce) included; the same training loss; the same gradient norms logged
    to TensorBoard (clip_grad_norm_ over sparse gradients)."""
    one, two = (torch.load(folder / "best.th") for folder in one_and_two_processes)
    assert one.keys() == two.keys() and "_softmax_loss.softmax_w.weight" in one
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    one_metrics, two_metrics = (
        json.loads((folder / "metrics.json").read_text()) for folder in one_and_two_processes
    )
    assert two_metrics["training_loss"] == pytest.approx(one_metrics["training_loss"], rel=1e-5)
    one_norms, two_norms = (
        read_scalars(folder / "log" / "train")["gradient_norm"] for folder in one_and_two_processes
    )
    assert len(one_norms) == 4 and two_norms == pytest.approx(one_norms, rel=1e-5)
    assert all(norm > 0.1 for norm in one_norms)  # clipping to 0.1 bit at every step


def test_sparse_softmax_archive_evaluates_exports_imports_and_embeds(
    one_and_two_processes, equal_length_corpus, tmp_path
):
    """The sparse-layout archive: `allennlp evaluate` (chunked full softmax) == its recorded
    validation perplexity; `allennlp elmo-export` writes its softmax rows; a fresh sparse model
    imports them and the biLM back; the embedder gives the same vectors from both."""
    archive = one_and_two_processes[0] / "model.tar.gz"
    recorded = json.loads((one_and_two_processes[0] / "metrics.json").read_text())
    evaluated = evaluation(archive, equal_length_corpus / "valid.txt", tmp_path / "eval.json")
    assert evaluated["perplexity"] == pytest.approx(recorded["validation_perplexity"], rel=1e-5)

    files = tmp_path / "elmo"
    run_allennlp_in_process(["elmo-export", str(archive), str(files)])
    model = load_archive(str(archive)).model.eval()
    weight, bias = model.softmax_matrices()
    rows = len((files / "vocab.txt").read_text().splitlines())
    file_weight, file_bias = read_softmax(str(files / "softmax.hdf5"), rows, weight.size(1))
    assert torch.equal(torch.from_numpy(file_weight), weight[:rows].detach())
    assert torch.equal(torch.from_numpy(file_bias), bias[:rows].detach())

    torch.manual_seed(1)  # a different initialization than the trained model's
    fresh = Model.from_params(
        vocab=model.vocab, params=Params(load_archive(str(archive)).config.as_dict()["model"])
    )
    assert isinstance(fresh._softmax_loss.softmax_w, torch.nn.Embedding)
    load_pretrained_files(
        str(files),
        fresh.bilm_encoder(),
        fresh.softmax_matrices(),
        fresh.vocab.get_token_to_index_vocabulary(),
    )
    for mine, theirs in zip(fresh.softmax_matrices(), model.softmax_matrices(), strict=True):
        assert torch.equal(mine[:rows], theirs[:rows])
    char_ids = batch_to_ids(
        [line.split() for line in (equal_length_corpus / "valid.txt").read_text().splitlines()]
    )
    with torch.no_grad():
        # (the files store each LSTM's two biases summed: compare what the layers compute)
        layers, _ = fresh.eval().bilm_encoder()(with_boundaries(char_ids))
        expected, _ = model.bilm_encoder()(with_boundaries(char_ids))
        assert max_diff(layers, expected) <= TOLERANCE
        from_archive, from_files = (
            ElmoBiLmEmbedder(Vocabulary(), pretrained_file=str(source), dropout=0.0).eval()(
                char_ids
            )
            for source in (archive, files)
        )
    assert max_diff([from_files], [from_archive]) <= TOLERANCE


def test_transformer_original_config_trains_its_sparse_softmax_with_fused_adam(
    equal_length_corpus, tmp_path
):
    """elmo_transformer_original.jsonnet shrunk (noam warm-up shortened): fused_adam's lazy Adam
    trains the sparse softmax and the training loss falls epoch over epoch."""
    values = {
        "model.contextualizer.feedforward_hidden_dim": 16,
        "model.contextualizer.num_layers": 1,
        "model.contextualizer.num_attention_heads": 2,
        "model.contextualizer.input_dropout": 0.0,
        "trainer.learning_rate_scheduler.warmup_steps": 10,
        "trainer.num_epochs": 3,
        "data_loader.batch_size": 16,
    }
    train("elmo_transformer_original.jsonnet", equal_length_corpus, tmp_path / "out", **values)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (
        config["model"]["sparse_embeddings"] is True
        and config["trainer"]["optimizer"]["type"] == "fused_adam"
    )
    losses = [
        json.loads((tmp_path / "out" / f"metrics_epoch_{epoch}.json").read_text())["training_loss"]
        for epoch in range(3)
    ]
    assert losses[0] > losses[1] > losses[2]
