"""CUDA: `elmo_graph_step` captures a training step of the original configs (shrunk) in one CUDA
graph and replays it: the replays train as eager steps do (the same losses, gradient norms and
parameters on the same batches and random draws), a changed learning rate is captured again, and
`allennlp train` with the trainer captures its step. Skipped without CUDA (one line);
`ELMO_CUDA_TESTS_DEVICE=cpu` skips it too (a CUDA graph needs CUDA)."""

import json
import os
from typing import Optional

import pytest
import torch
from allennlp.common import Params
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.learning_rate_schedulers import LearningRateScheduler

from benchmarks.step_audit import CONFIGS, SHRUNK, SHRUNK_CONTEXTUALIZER, AuditedStep
from benchmarks.support.trainer_batch import handed_on
from elmo_plugin.data.corpus_data_loader import to_device
from elmo_plugin.training.elmo_graph_step import ElmoGraphStepTrainer, host_step_counters
from tests.helpers import CONFIG_DIR, TINY_CHAR_CNN_OVERRIDES, overrides, run_allennlp

DEVICE = os.environ.get("ELMO_CUDA_TESTS_DEVICE", "cuda:0")
if not DEVICE.startswith("cuda") or not torch.cuda.is_available():
    pytest.skip("CUDA graph tests: no CUDA device here", allow_module_level=True)
GPU = torch.device(DEVICE)
NO_DROPOUT = {
    "lstm": {"model.dropout": 0.0, "model.contextualizer.dropout": 0.0},
    "transformer": {
        "model.dropout": 0.0,
        "model.contextualizer.dropout": 0.0,
        "model.contextualizer.input_dropout": 0.0,
    },
}


def schedule(name: str, optimizer: torch.optim.Optimizer) -> Optional[LearningRateScheduler]:
    """The transformer config's noam schedule, shrunk; none for the LSTM."""
    if name != "transformer":
        return None
    params = Params({"type": "noam", "model_size": 16, "warmup_steps": 4})
    return LearningRateScheduler.from_params(optimizer=optimizer, params=params)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_replayed_steps_train_as_eager_steps(name, tmp_path):
    """Warm-up, capture and 5 replays against allennlp's eager trainer on a copy: each lagged
    loss and norm is the eager one of the batch before, the parameters and the host's step
    counters agree at the end. The LSTM's learning rate is halved before the fifth batch (the
    step captured again), the transformer's follows its config's noam schedule (read from a
    device tensor by the captured step)."""
    values = {**SHRUNK, **SHRUNK_CONTEXTUALIZER[name], **NO_DROPOUT[name]}
    runs = [AuditedStep(CONFIGS[name], values, GPU) for _ in range(2)]
    trainers = [
        cls(
            run.model,
            run.optimizer,
            run.loader,
            serialization_dir=str(tmp_path / cls.__name__),
            grad_norm=run.grad_norm,
            cuda_device=GPU,
            learning_rate_scheduler=schedule(name, run.optimizer),
            **options,
        )
        for cls, run, options in [
            (ElmoGraphStepTrainer, runs[0], {"warmup_batches": 1}),
            (GradientDescentTrainer, runs[1], {}),
        ]
    ]
    handed, eager = [], []
    for index in range(7):
        if index == 5 and name == "lstm":
            for run in runs:
                for group in run.optimizer.param_groups:
                    group["lr"] /= 2
        batch = to_device(next(runs[0].batches), GPU)
        for trainer, out in zip(trainers, (handed, eager), strict=True):
            torch.manual_seed(index)
            out.append(handed_on(trainer, batch))
    assert trainers[0].captured and trainers[0]._replayed
    # batch 0 the warm-up on the capture stream (its own values: the first read), batch 1
    # captured, each from then on handing on the values of the batch before
    assert handed[0] == pytest.approx(eager[0], rel=1e-5)
    for index in range(1, 7):
        assert handed[index] == pytest.approx(eager[index - 1], rel=1e-4), index
    pairs = zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    counters = [host_step_counters(run.optimizer) for run in runs]
    assert [float(c) for c in counters[0]] == [float(c) for c in counters[1]]


def test_allennlp_train_captures_the_step(tiny_corpus, tmp_path):
    out = tmp_path / "model"
    values = {
        "train_data_path": str(tiny_corpus / "train" / "*.txt"),
        "validation_data_path": str(tiny_corpus / "valid.txt"),
        **TINY_CHAR_CNN_OVERRIDES,
        "model.contextualizer.cell_size": 32,
        "model.num_samples": 40,
        "data_loader.batch_size": 8,
        "data_loader.num_workers": 0,
        "trainer.type": "elmo_graph_step",
        "trainer.num_epochs": 2,
        "trainer.cuda_device": GPU.index or 0,
    }
    config = str(CONFIG_DIR / "elmo_lstm_original.jsonnet")
    run_allennlp(["train", config, "-s", str(out), "-o", overrides(values)])
    log = (out / "out.log").read_text()
    assert "the training step is captured in a CUDA graph" in log and "eager steps" not in log
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["training_perplexity"] < 1e4
    assert metrics["validation_perplexity"] < 1e4
