"""allennlp's gradient clipping (`trainer.grad_norm`) on the sparse softmax's gradients: torch
2.14 clips them as it clips dense ones; an older torch cannot (NotImplementedError inside
`clip_grad_norm_`, seen on torch 2.11), and `allennlp train` then stops before the first batch
with one line saying what to change."""

import subprocess
import sys

import pytest
import torch

from elmo_plugin.training import sparse_gradient_sync
from tests.helpers import (
    CONFIG_DIR,
    REPO_ROOT,
    TINY_CHAR_CNN_OVERRIDES,
    overrides,
    run_allennlp_in_process,
)

SPARSE_ORIGINAL = {  # elmo_lstm_original.jsonnet shrunk: sparse softmax, Adagrad, grad_norm 10
    **TINY_CHAR_CNN_OVERRIDES,
    "model.contextualizer.cell_size": 32,
    "model.num_samples": 40,
    "model.row_gradients": False,  # sparse tensors: what an older torch cannot clip
    "data_loader.batch_size": 16,
    "data_loader.num_workers": 0,
    "trainer.num_epochs": 1,
    "trainer.cuda_device": -1,
}


def test_this_torch_clips_a_sparse_gradient_as_its_dense_equal():
    assert sparse_gradient_sync.torch_norms_sparse_gradients()
    rows, values = torch.tensor([[4, 1, 4]]), torch.randn(3, 5)
    sparse, dense = (torch.nn.Parameter(torch.randn(6, 5)) for _ in range(2))
    sparse.grad = torch.sparse_coo_tensor(rows, values, (6, 5), check_invariants=True)
    dense.grad = sparse.grad.to_dense()
    norms = [torch.nn.utils.clip_grad_norm_([p], 0.5) for p in (sparse, dense)]
    assert torch.allclose(norms[0], norms[1]) and norms[0] > 0.5
    assert torch.allclose(sparse.grad.to_dense(), dense.grad)
    assert torch.linalg.vector_norm(dense.grad) == pytest.approx(0.5, rel=1e-5)


def test_asking_this_torch_warns_nothing():
    """In a fresh process: torch warns once per process about a sparse tensor made without
    saying whether to check its invariants."""
    code = (
        "import warnings\n"
        "from elmo_plugin.training.sparse_gradient_sync import torch_norms_sparse_gradients\n"
        "warnings.simplefilter('error')\n"
        "assert torch_norms_sparse_gradients()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]


def train(tiny_corpus, out, values: dict):
    values = dict(
        SPARSE_ORIGINAL,
        train_data_path=str(tiny_corpus / "train" / "*.txt"),
        validation_data_path=str(tiny_corpus / "valid.txt"),
        **values,
    )
    config = str(CONFIG_DIR / "elmo_lstm_original.jsonnet")
    return run_allennlp_in_process(
        ["train", config, "-s", str(out), "-o", overrides(values)], check=False
    )


def test_a_torch_that_cannot_clip_sparse_gradients_stops_training_with_one_line(
    tiny_corpus, tmp_path, monkeypatch
):
    monkeypatch.setattr(sparse_gradient_sync, "torch_norms_sparse_gradients", lambda: False)
    result = train(tiny_corpus, tmp_path / "refused", {})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "allennlp.common.checks.ConfigurationError: trainer.grad_norm: torch "
        f"{torch.__version__} cannot clip the sparse gradients of "
        "_softmax_loss.softmax_w.weight (model.sparse_embeddings: true); torch 2.14 or later "
        "can: install it, or set model.sparse_embeddings or trainer.grad_norm to false"
    )
    assert "- Training" not in result.stderr
    assert not (tmp_path / "refused" / "model.tar.gz").exists()
    # what the line offers trains on the same torch
    result = train(tiny_corpus, tmp_path / "unclipped", {"trainer.grad_norm": False})
    assert result.returncode == 0 and (tmp_path / "unclipped" / "model.tar.gz").is_file()


def test_an_optimizer_that_would_not_apply_row_gradients_stops_training_with_one_line(
    tiny_corpus, tmp_path
):
    """allennlp's own `adagrad` would update the softmax's `TableRows` as a parameter of its own
    and never the softmax: refused before the first batch (elmo_process_settings)."""
    values = {"model.row_gradients": True, "trainer.optimizer.type": "adagrad"}
    result = train(tiny_corpus, tmp_path / "refused", values)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "allennlp.common.checks.ConfigurationError: trainer.optimizer: AdagradOptimizer would "
        "not update the softmax of model.row_gradients: true (_softmax_loss.touched.rows_0); "
        "use elmo_adagrad or fused_adam, or set model.row_gradients to false"
    )
    assert "- Training" not in result.stderr
