"""`trainer.type: "elmo_graph_step"` through `allennlp train` on the CPU: eager steps (one log
line) with the same batches, losses and perplexities as allennlp's `gradient_descent` (the
shrunk original config and the demo configs), exact mid-epoch resume with `-r`, and its GPU path
(stand-ins for the graph) beside the shipped callbacks."""

import json
from pathlib import Path

import pytest

from tests.cli.test_exact_resume_cli import (
    KILL,
    KILLED_AT,
    SAVED_AT,
    recorded,
    shared_run,
    shrunk_original,
    train,
)
from tests.helpers import (
    CONFIG_DIR,
    TINY_LSTM_OVERRIDES,
    TINY_TRANSFORMER_OVERRIDES,
    run_allennlp_in_process,
    train_args,
)
from tests.training.test_elmo_graph_step import replays_on_the_cpu  # noqa: F401  (a fixture)
from tests.training.test_tensorboard_callbacks import read_scalars

GRAPH_STEP = {"trainer.type": "elmo_graph_step", "trainer.warmup_batches": 2}
METRICS = ("training_loss", "training_perplexity", "validation_loss", "validation_perplexity")


def assert_same_metrics(plain: Path, graph: Path, names: tuple[str, ...] = METRICS) -> None:
    """The two runs' metrics.json agree on `names` (to float32 rounding)."""
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (plain, graph)]
    for name in names:
        assert metrics[1][name] == pytest.approx(metrics[0][name], rel=1e-6), name


@pytest.mark.slow
def test_graph_step_trains_as_gradient_descent_on_the_cpu_and_resumes_exactly(
    tiny_corpus, tmp_path, tmp_path_factory
):
    plain = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    graph = {**plain, **GRAPH_STEP}
    plain_run = shared_run(tmp_path_factory, plain)  # test_exact_resume_cli's, shared
    train(graph, tmp_path / "whole", tmp_path / "whole-record")
    log = (tmp_path / "whole" / "out.log").read_text()
    assert log.count("elmo_graph_step: eager steps: the device is cpu, not CUDA") == 1
    assert_same_metrics(plain_run / "out", tmp_path / "whole")
    for epoch in range(2):
        assert recorded(tmp_path / "whole-record", 0, epoch) == recorded(
            plain_run / "record", 0, epoch
        )
    killed = train(graph, tmp_path / "cut", tmp_path / "killed-record", kill=KILL)
    assert killed.returncode != 0
    train(graph, tmp_path / "cut", tmp_path / "resumed-record", resume=True)
    epoch = KILLED_AT[0]
    before = recorded(tmp_path / "killed-record", 0, epoch, up_to=SAVED_AT)
    after = recorded(tmp_path / "resumed-record", 0, epoch)
    assert min(after) == SAVED_AT + 1
    assert {**before, **after} == recorded(tmp_path / "whole-record", 0, epoch)


@pytest.mark.usefixtures("replays_on_the_cpu")
def test_replayed_steps_report_the_epochs_exact_loss_beside_the_shipped_callbacks(
    tiny_corpus, tmp_path
):
    """The trainer's GPU path on the CPU (tests/training's stand-ins for the graph and the lagged
    host reads), with the original config's callbacks and validation checks that halve the
    learning rate: the batch values it hands on come one late, yet TensorBoard gets every
    batch's, the rate changes are captured again, and an epoch's loss and perplexities are those
    of allennlp's `gradient_descent`."""
    plain = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    callbacks = [
        {"type": "elmo_process_settings", "keep_freed_heap": True},
        {"type": "elmo_tensorboard", "summary_interval": 2},
        {"type": "tokens_per_second", "summary_interval": 2},
        {"type": "elmo_corpus_resume"},
        {  # "+perplexity": no check after the first is a best one: the rate halves every check
            "type": "elmo_validation_checks",
            "every_num_batches": 8,
            "validation_metric": "+perplexity",
            "lr_patience": 1,
        },
    ]
    plain["trainer.callbacks"] = callbacks
    train(plain, tmp_path / "plain", tmp_path / "plain-record")
    train({**plain, **GRAPH_STEP}, tmp_path / "graph", tmp_path / "graph-record")
    log = (tmp_path / "graph" / "out.log").read_text()
    assert log.count("the training step is captured in a CUDA graph") >= 2
    assert "the optimizer's options changed; capturing the step again" in log
    assert_same_metrics(tmp_path / "plain", tmp_path / "graph")
    scalars = [read_scalars(tmp_path / run / "log" / "train") for run in ("plain", "graph")]
    for tag in ("train/batch_loss", "train/tokens_per_second"):
        assert scalars[1][tag].keys() == scalars[0][tag].keys() and scalars[1][tag], tag
    checks = [
        (tmp_path / run / "validation_checks.jsonl").read_text() for run in ("plain", "graph")
    ]
    assert checks[0].count("\n") == checks[1].count("\n") > 2


@pytest.mark.parametrize(
    "config, values",
    [
        ("elmo_lstm.jsonnet", TINY_LSTM_OVERRIDES),
        ("elmo_transformer.jsonnet", TINY_TRANSFORMER_OVERRIDES),
    ],
    ids=["lstm", "transformer"],
)
def test_the_demo_configs_train_eagerly_with_it_on_the_cpu(config, values, tiny_corpus, tmp_path):
    """`make demo`'s configs, tiny, one epoch: with `elmo_graph_step` one log line says why it is
    eager, and the metrics are `gradient_descent`'s."""
    values = {
        **values,
        "train_data_path": str(tiny_corpus / "train" / "*.txt"),
        "validation_data_path": str(tiny_corpus / "valid.txt"),
        "trainer.num_epochs": 1,
    }
    for run, extra in (("plain", {}), ("graph", {"trainer.type": "elmo_graph_step"})):
        run_allennlp_in_process(
            train_args(CONFIG_DIR / config, tmp_path / run, {**values, **extra})
        )
    log = (tmp_path / "graph" / "out.log").read_text()
    assert log.count("elmo_graph_step: eager steps: the device is cpu, not CUDA") == 1
    names = ("training_loss", "training_perplexity", "validation_perplexity")
    assert_same_metrics(tmp_path / "plain", tmp_path / "graph", names)
