"""`trainer.type: "elmo_graph_step"` through `allennlp train` on the CPU: eager steps (one log
line), the same batches, losses and perplexities as allennlp's `gradient_descent`, and exact
mid-epoch resume with `-r`."""

import json

import pytest

from tests.cli.test_exact_resume_cli import (
    KILL,
    KILLED_AT,
    SAVED_AT,
    recorded,
    shrunk_original,
    train,
)
from tests.training.test_elmo_graph_step import replays_on_the_cpu  # noqa: F401  (a fixture)

GRAPH_STEP = {"trainer.type": "elmo_graph_step", "trainer.warmup_batches": 2}


def test_graph_step_trains_as_gradient_descent_on_the_cpu_and_resumes_exactly(
    tiny_corpus, tmp_path
):
    plain = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    graph = {**plain, **GRAPH_STEP}
    train(plain, tmp_path / "plain", tmp_path / "plain-record")
    train(graph, tmp_path / "whole", tmp_path / "whole-record")
    log = (tmp_path / "whole" / "out.log").read_text()
    assert log.count("elmo_graph_step: eager steps: the device is cpu, not CUDA") == 1
    metrics = [
        json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("plain", "whole")
    ]
    for name in (
        "training_loss",
        "training_perplexity",
        "validation_loss",
        "validation_perplexity",
    ):
        assert metrics[1][name] == pytest.approx(metrics[0][name], rel=1e-6), name
    for epoch in range(2):
        assert recorded(tmp_path / "whole-record", 0, epoch) == recorded(
            tmp_path / "plain-record", 0, epoch
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
def test_replayed_steps_report_the_epochs_exact_loss(tiny_corpus, tmp_path):
    """The trainer's GPU path on the CPU (tests/training's stand-ins for the graph and the lagged
    host reads): the batches it hands on one late, an epoch's loss and perplexities are still
    those of allennlp's `gradient_descent`."""
    plain = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    train(plain, tmp_path / "plain", tmp_path / "plain-record")
    train({**plain, **GRAPH_STEP}, tmp_path / "graph", tmp_path / "graph-record")
    log = (tmp_path / "graph" / "out.log").read_text()
    assert log.count("the training step is captured in a CUDA graph") == 1
    metrics = [
        json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("plain", "graph")
    ]
    for name in (
        "training_loss",
        "training_perplexity",
        "validation_loss",
        "validation_perplexity",
    ):
        assert metrics[1][name] == pytest.approx(metrics[0][name], rel=1e-6), name
