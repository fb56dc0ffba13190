"""`elmo_graph_step` on the CPU: the step function it captures on a GPU trains exactly as
allennlp's per-batch code, reads nothing on the host and dispatches the same ops for every batch;
the trainer itself runs eagerly there and says why. (The capture: tests/cuda.)"""

import copy
import logging
from types import SimpleNamespace

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.learning_rate_schedulers import LearningRateScheduler

from benchmarks.step_audit import CONFIGS, SHRUNK, SHRUNK_CONTEXTUALIZER, AuditedStep
from benchmarks.support.op_audit import OpAudit
from benchmarks.support.trainer_batch import handed_on, train_batch
from elmo_plugin.data.corpus_data_loader import to_device
from elmo_plugin.modules.device_paths import gpu_path_on_cpu
from elmo_plugin.training import elmo_graph_step
from elmo_plugin.training.elmo_graph_step import (
    ElmoGraphStepTrainer,
    fused_groups_capturable,
    host_step_counters,
)
from elmo_plugin.training.elmo_validation_checks import validation_metrics
from elmo_plugin.training.lagged_readback import LaggedReadback
from elmo_plugin.training.step_graph import batch_layout
from elmo_plugin.training.trainer_keys import refuse_unknown_trainer_keys


def trainer_for(run: AuditedStep, folder, trainer_class=ElmoGraphStepTrainer, **options):
    return trainer_class(
        run.model,
        run.optimizer,
        run.loader,
        serialization_dir=str(folder),
        grad_norm=run.grad_norm,
        cuda_device=-1,
        **options,
    )


@pytest.fixture(autouse=True)
def on_the_gpu_path():
    """Every test here on the paths a GPU runs (`gpu_path_on_cpu`): the character CNN's
    fixed-shape reference, the LSTM's whole-sequence function."""
    with gpu_path_on_cpu():
        yield


def shrunk(name: str) -> AuditedStep:
    return AuditedStep(CONFIGS[name], {**SHRUNK, **SHRUNK_CONTEXTUALIZER[name]})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_captured_step_trains_as_allenlps_per_batch_code(name, tmp_path):
    """Three batches through `_step` (what a GPU captures) and through allennlp's own
    batch_outputs / backward / rescale_gradients / clip_gradient / optimizer.step, the same
    random draws: the same losses, gradient norms, parameters and optimizer state."""
    runs = [shrunk(name), shrunk(name)]
    graph = trainer_for(runs[0], tmp_path / "graph")
    plain = trainer_for(runs[1], tmp_path / "plain", GradientDescentTrainer)
    for _ in range(3):
        batch = next(runs[0].batches)
        next(runs[1].batches)
        torch.manual_seed(1)
        scalars = graph._step(batch)
        torch.manual_seed(1)
        runs[1].optimizer.zero_grad(set_to_none=True)
        outputs = plain.batch_outputs(batch, for_training=True)
        outputs["loss"].backward()
        norm = plain.rescale_gradients()
        plain.clip_gradient()
        runs[1].optimizer.step()
        assert float(scalars["loss"]) == pytest.approx(outputs["loss"].item(), rel=1e-6)
        assert float(scalars["grad_norm"]) == pytest.approx(norm, rel=1e-5)
    assert all(p.grad is None for p in runs[0].model.parameters())
    pairs = zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert [float(c) for c in host_step_counters(runs[0].optimizer)] == [
        float(c) for c in host_step_counters(runs[1].optimizer)
    ]
    assert graph.model.get_metrics() == pytest.approx(plain.model.get_metrics(), rel=1e-6)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_captured_step_reads_nothing_on_the_host_and_keeps_its_shapes(name, tmp_path):
    """On what a GPU runs (benchmarks.step_audit's GPU path): the step has no host read and no
    data-dependent shape, and two batches dispatch the same ops on the same shapes."""
    run = shrunk(name)
    trainer = trainer_for(run, tmp_path)
    trainer._step(next(run.batches))  # the optimizer's state and the sampler's table
    audits = []
    for _ in range(2):
        audit = OpAudit()
        audit.on_host(host_step_counters(run.optimizer))
        batch = next(run.batches)
        audit.run("step", lambda batch=batch: trainer._step(batch))
        audits.append(audit)
    assert audits[0].syncs() == []
    assert audits[1].trace() == audits[0].trace()


def test_on_the_cpu_it_trains_eagerly_and_says_why(tmp_path, caplog):
    run = shrunk("lstm")
    with caplog.at_level(logging.INFO, "elmo_plugin.training.elmo_graph_step"):
        trainer = trainer_for(run, tmp_path)
    assert trainer.eager_reason == "the device is cpu, not CUDA"
    assert "elmo_graph_step: eager steps: the device is cpu, not CUDA" in caplog.messages
    batch = next(run.batches)
    assert trainer._graph_for(batch) is None and not trainer.captured


def test_fewer_than_one_warmup_batch_is_refused_in_one_line(tmp_path):
    with pytest.raises(
        ConfigurationError, match="trainer.warmup_batches must be at least 1, got 0"
    ):
        trainer_for(shrunk("transformer"), tmp_path, warmup_batches=0)


def test_a_batch_of_another_shape_does_not_fit_the_captured_layout():
    batch = {"source": {"tokens": {"tokens": torch.zeros(8, 22, dtype=torch.long)}}}
    same = {"source": {"tokens": {"tokens": torch.ones(8, 22, dtype=torch.long)}}}
    shorter = {"source": {"tokens": {"tokens": torch.zeros(8, 21, dtype=torch.long)}}}
    other_dtype = {"source": {"tokens": {"tokens": torch.zeros(8, 22, dtype=torch.int)}}}
    other_key = {"source": {"chars": {"tokens": torch.zeros(8, 22, dtype=torch.long)}}}
    assert batch_layout(batch) == batch_layout(same)
    for other in (shorter, other_dtype, other_key):
        assert batch_layout(other) != batch_layout(batch)


def test_a_lagged_readback_of_a_cpu_tensor_is_a_copy_of_its_values_now():
    readback, tensor = LaggedReadback(), torch.tensor([1.0, 2.0])
    read = readback.read(tensor)
    tensor.add_(1)
    assert read.tolist() == [1.0, 2.0] and readback.read(tensor).tolist() == [2.0, 3.0]


def test_the_perplexity_totals_stay_in_one_buffer_across_resets():
    """A captured step keeps adding into the buffer it captured: reset zeroes it in place."""
    run = shrunk("lstm")
    run.model(**to_device(next(run.batches), torch.device("cpu")))
    metric = run.model._token_weighted_perplexity
    buffer = metric._totals
    before = metric.get_metric(reset=True)
    assert before["perplexity"] > 1 and metric._totals is buffer and buffer.abs().sum() == 0
    run.model(**next(run.batches))
    assert metric._totals is buffer and metric.get_metric()["perplexity"] > 1


class EagerStepGraph:
    """`StepGraph` on the CPU: each replay runs the step on the batch (the host's step counters
    advance in the step itself here: a capture would find none to advance)."""

    def __init__(self, step, batch, stream) -> None:
        self.step, self.layout, self.stream = step, batch_layout(batch), stream
        stream.captures += 1

    def fits(self, batch) -> bool:
        return batch_layout(batch) == self.layout

    def replay(self, batch):
        return self.step(batch)


class CpuCaptureStream:
    """`CaptureStream` on the CPU: runs the function, counting what ran on it."""

    def __init__(self, device) -> None:
        self.runs, self.captures, self.resets = 0, 0, 0

    def run(self, function, *args):
        self.runs += 1
        return function(*args)

    def reset(self) -> None:
        self.resets += 1


class OneLateReadback(LaggedReadback):
    """`LaggedReadback` as on a GPU, on the CPU: the previous read's values (the first read its
    own)."""

    def read(self, tensor):
        previous, self._pending = self._pending, (tensor.detach().clone(), None)
        return (previous or self._pending)[0]


@pytest.fixture
def replays_on_the_cpu(monkeypatch):
    """`elmo_graph_step` taking its GPU path on the CPU, with the stand-ins above."""
    monkeypatch.setattr(elmo_graph_step, "StepGraph", EagerStepGraph)
    monkeypatch.setattr(elmo_graph_step, "CaptureStream", CpuCaptureStream)
    monkeypatch.setattr(elmo_graph_step, "LaggedReadback", OneLateReadback)
    monkeypatch.setattr(ElmoGraphStepTrainer, "_why_eager", lambda self: None)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_replays_hand_on_the_batch_befores_values_and_train_as_eager_steps(
    name, tmp_path, replays_on_the_cpu, caplog
):
    """The trainer's replay path (tests/cuda runs it on a captured graph): 2 eager warm-up
    batches (the second on the capture stream), 3 replays, a halved learning rate (captured
    again), 2 more, against allennlp's trainer on the same batches and random draws: from the
    warm-up's last batch on each hands on the loss and norm of the batch before (the first its
    own), the host's step counters advance once per batch, the parameters agree."""
    runs = [shrunk(name), shrunk(name)]
    graph = trainer_for(runs[0], tmp_path / "graph", warmup_batches=2)
    plain = trainer_for(runs[1], tmp_path / "plain", GradientDescentTrainer)
    handed, eager = [], []
    with caplog.at_level(logging.INFO, "elmo_plugin.training.elmo_graph_step"):
        for index in range(7):
            if index == 5:
                for run in runs:
                    for group in run.optimizer.param_groups:
                        group["lr"] /= 2
            batch = next(runs[0].batches)
            for trainer, out in zip((graph, plain), (handed, eager), strict=True):
                torch.manual_seed(index)
                out.append(handed_on(trainer, batch))
    assert sum(handed[:2], []) == pytest.approx(sum(eager[:2], []), rel=1e-6)
    for index in range(2, 7):
        assert handed[index] == pytest.approx(eager[index - 1], rel=1e-6), index
    assert (
        caplog.messages.count("elmo_graph_step: the training step is captured in a CUDA graph") == 2
    )
    assert (
        "elmo_graph_step: the optimizer's options changed; capturing the step again"
        in caplog.messages
    )
    assert float(graph._exact["loss"]) == pytest.approx(
        sum(pair[0] for pair in eager[1:]), rel=1e-6
    )
    assert graph._lagged["loss"] == pytest.approx(sum(pair[0] for pair in handed[1:]), rel=1e-6)
    pairs = zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert [float(c) for c in host_step_counters(runs[0].optimizer)] == [
        float(c) for c in host_step_counters(runs[1].optimizer)
    ]


def test_a_key_the_trainer_would_ignore_is_refused_and_its_own_key_is_not():
    refuse_unknown_trainer_keys({"type": "elmo_graph_step", "warmup_batches": 2, "grad_norm": 1})
    with pytest.raises(ConfigurationError, match="did you mean trainer.warmup_batches"):
        refuse_unknown_trainer_keys({"type": "elmo_graph_step", "warmup_batch": 2})
    with pytest.raises(ConfigurationError, match="trainer.warmup_batches is not a key"):
        refuse_unknown_trainer_keys({"warmup_batches": 2})


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.usefixtures("replays_on_the_cpu")
def test_with_a_scheduler_each_replay_reads_the_batchs_learning_rate(name, tmp_path):
    """A noam schedule (the original transformer's) over either config's optimizer
    (`elmo_adagrad`, `fused_adam`): the captured step reads the learning rates from device
    tensors, set before each replay to the batch's rate; the parameters and rates follow
    allennlp's trainer with the same schedule."""
    runs = [shrunk(name), shrunk(name)]
    schedule = {"type": "noam", "model_size": 16, "warmup_steps": 4}
    trainers = [
        trainer_for(
            run,
            tmp_path / str(index),
            trainer_class,
            learning_rate_scheduler=LearningRateScheduler.from_params(
                optimizer=run.optimizer, params=Params(dict(schedule))
            ),
            **options,
        )
        for index, (run, trainer_class, options) in enumerate(
            [
                (runs[0], ElmoGraphStepTrainer, {"warmup_batches": 2}),
                (runs[1], GradientDescentTrainer, {}),
            ]
        )
    ]
    rates = []
    for index in range(7):
        batch = next(runs[0].batches)
        for trainer in trainers:
            torch.manual_seed(index)
            train_batch(trainer, batch)
        rates.append([group["lr"] for run in runs for group in run.optimizer.param_groups])
    assert trainers[0]._replayed and len(trainers[0]._learning_rates) == 1
    assert all(rate[0] == rate[1] for rate in rates) and len({rate[0] for rate in rates}) == 7
    pairs = zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_each_reason_to_train_eagerly_is_named(tmp_path):
    """On a CUDA device nothing keeps the original LSTM from its capture; each of these does."""
    trainer = trainer_for(shrunk("lstm"), tmp_path)
    trainer.cuda_device = torch.device("cuda", 0)
    assert trainer._why_eager() is None
    for attribute, value, reason in [
        ("_distributed", True, "distributed training"),
        ("_num_gradient_accumulation_steps", 2, "num_gradient_accumulation_steps > 1"),
        ("_momentum_scheduler", object(), "a momentum scheduler"),
        ("_use_amp", True, "use_amp"),
    ]:
        saved = getattr(trainer, attribute)
        setattr(trainer, attribute, value)
        assert trainer._why_eager() == reason
        setattr(trainer, attribute, saved)
    trainer.optimizer.param_groups[0]["lr_decay"] = 0.1
    assert trainer._why_eager() == "the optimizer's lr_decay counts steps on the host"


def test_fused_groups_say_capturable_during_the_capture_only(tmp_path):
    """torch refuses to capture an optimizer whose groups are not `capturable`; `fused_adam`'s
    fused kernel ignores the flag, so the capture sets it and puts it back."""
    optimizer = shrunk("transformer").optimizer
    assert [group["capturable"] for group in optimizer.param_groups] == [False]
    with fused_groups_capturable(optimizer):
        assert [group["capturable"] for group in optimizer.param_groups] == [True]
    assert [group["capturable"] for group in optimizer.param_groups] == [False]
    adagrad = shrunk("lstm").optimizer
    with fused_groups_capturable(adagrad):
        assert not any(group.get("capturable") for group in adagrad.param_groups)


def test_a_copied_readback_drops_its_pending_read():
    """A pending CUDA event cannot be copied (`elmo_validation_checks` copies the metrics)."""
    readback = LaggedReadback()
    readback._pending = (torch.ones(1), object())
    assert copy.deepcopy(readback)._pending is None


def test_validation_puts_the_training_metric_back_into_its_own_buffer():
    """`elmo_validation_checks` measures the model in the middle of an epoch: the training
    perplexity's totals come back in the same buffer (a captured step adds into it)."""
    run = shrunk("lstm")
    run.model(**next(run.batches))
    metric = run.model._token_weighted_perplexity
    buffer, totals = metric._totals, metric._totals.clone()
    trainer = SimpleNamespace(model=run.model, batch_outputs=run_model(run.model))
    validation = validation_metrics(trainer, [next(run.batches)])
    assert validation["perplexity"] > 1
    assert metric._totals is buffer and torch.equal(buffer, totals)
    assert run.model._token_weighted_perplexity is metric


def run_model(model):
    def batch_outputs(batch, for_training):
        return model(**batch)

    return batch_outputs


@pytest.mark.usefixtures("replays_on_the_cpu")
def test_the_last_warmup_batch_runs_on_the_stream_the_capture_runs_on(tmp_path):
    """3 warm-up batches: the first two allennlp's, the third the step on the capture stream;
    the capture on that same stream; the trained parameters those of allennlp's trainer."""
    runs = [shrunk("lstm"), shrunk("lstm")]
    graph = trainer_for(runs[0], tmp_path / "graph", warmup_batches=3)
    plain = trainer_for(runs[1], tmp_path / "plain", GradientDescentTrainer)
    streams = []
    for index in range(5):
        batch = next(runs[0].batches)
        for trainer in (graph, plain):
            torch.manual_seed(index)
            train_batch(trainer, batch)
        stream = graph._stream
        streams.append(None if stream is None else (stream.runs, stream.captures))
    assert streams == [None, None, (1, 0), (1, 1), (1, 1)]
    assert graph._graph.stream is graph._stream
    pairs = zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


class FailingCapture:
    def __init__(self, step, batch, stream) -> None:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")


@pytest.mark.usefixtures("replays_on_the_cpu")
def test_a_capture_that_fails_is_one_warning_and_training_goes_on_eagerly(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(elmo_graph_step, "StepGraph", FailingCapture)
    runs = [shrunk("transformer"), shrunk("transformer")]
    graph = trainer_for(runs[0], tmp_path / "graph", warmup_batches=1)
    plain = trainer_for(runs[1], tmp_path / "plain", GradientDescentTrainer)
    with caplog.at_level(logging.INFO, "elmo_plugin.training.elmo_graph_step"):
        for index in range(4):
            batch = next(runs[0].batches)
            losses = []
            for trainer in (graph, plain):
                torch.manual_seed(index)
                losses.append(handed_on(trainer, batch)[0])
            if index != 0:  # the warm-up batch (on the capture stream) hands on its own loss
                assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    reason = (
        "the step could not be captured: "
        "CUDA error: operation not permitted when stream is capturing"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"elmo_graph_step: eager steps: {reason}"]
    assert graph.eager_reason == reason and not graph.captured and graph._stream.resets == 1
    pairs = zip(runs[0].model.parameters(), runs[1].model.parameters(), strict=True)
    for ours, theirs in pairs:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
