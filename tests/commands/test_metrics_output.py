"""allennlp's `dump_metrics` is replaced by `dump_metrics_whole` once elmo_plugin is imported: the
same JSON and log line, the file written whole."""

import logging

from allennlp.common import util as common_util
from allennlp.evaluation import evaluator

import elmo_plugin  # noqa: F401
from elmo_plugin.commands.metrics_output import dump_metrics_whole

METRICS = {"epoch": 0, "training_loss": 5.69, "training_duration": "0:00:01", "best_epoch": None}


def test_allennlp_dumps_metrics_through_ours_writing_the_same_json(tmp_path, caplog):
    assert common_util.dump_metrics is dump_metrics_whole
    # allennlp's own: the evaluator imported it by name before elmo_plugin replaced it
    assert evaluator.dump_metrics is not dump_metrics_whole
    ours, allennlps = tmp_path / "ours.json", tmp_path / "allennlps.json"
    with caplog.at_level(logging.INFO, logger="allennlp.common.util"):
        common_util.dump_metrics(str(ours), METRICS, log=True)
        evaluator.dump_metrics(str(allennlps), METRICS, log=True)
    assert ours.read_text() == allennlps.read_text()
    logged = [(record.name, record.getMessage()) for record in caplog.records]
    assert logged[0] == logged[1] == ("allennlp.common.util", f"Metrics: {ours.read_text()}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["allennlps.json", "ours.json"]
