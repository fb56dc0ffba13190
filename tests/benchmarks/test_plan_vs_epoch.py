"""plan_vs_epoch's checks' share at a user's interval reads the right settings and log lines."""

import json

from benchmarks import plan_vs_epoch
from benchmarks.support.common import CONFIG_DIR


def test_the_suggested_original_interval_is_the_one_the_config_suggests():
    text = (CONFIG_DIR / "elmo_lstm_original.jsonnet").read_text()
    every, most = plan_vs_epoch.SUGGESTED_ORIGINAL_CHECKS.values()
    assert f'"elmo_validation_checks", every_num_batches: {every}, max_batches: {most} }}' in text


def test_the_checks_seconds_are_read_from_each_checks_log_line():
    log = "\n".join(
        [
            "2026-11-26 16:29:01,000 - INFO - elmo_plugin.training.elmo_validation_checks - "
            "elmo_validation_checks: check at batch 50: perplexity 560.3 (best so far) in 1.25 s "
            "(validation 0.5 s)",
            "2026-11-26 16:29:09,000 - INFO - elmo_plugin.training.elmo_validation_checks - "
            "elmo_validation_checks: check at batch 100: perplexity 561 in 0.75 s "
            "(validation 0.7 s)",
            "2026-11-26 16:29:17,711 - INFO - allennlp.training.gradient_descent_trainer - "
            "Epoch duration: 0:00:41.914270",
        ]
    )
    assert plan_vs_epoch.CHECK_SECONDS.findall(log) == [("1.25", "0.5"), ("0.75", "0.7")]


def test_the_demo_run_checks_as_the_demo_config_ships():
    shipped = plan_vs_epoch.checks_settings(plan_vs_epoch.DEMO_CONFIG, {"trainer.num_epochs": 1})
    callbacks = [{"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 2}]
    overridden = plan_vs_epoch.checks_settings(
        plan_vs_epoch.DEMO_CONFIG, {"trainer.callbacks": json.loads(json.dumps(callbacks))}
    )
    assert (shipped["every_num_batches"], shipped["max_batches"]) == (50, 5)
    assert overridden == callbacks[0]
