"""`elmo_validation_checks`' decisions on scripted metrics: the best check, the plateau that
lowers the learning rate, what a non-primary process writes (nothing), and bad settings."""

import json
import logging
import re
from types import SimpleNamespace

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.archives.bilm_archive import load_bilm_model
from elmo_plugin.training import elmo_validation_checks
from elmo_plugin.training.elmo_validation_checks import ValidationChecksCallback
from tests.helpers import REPO_ROOT

BILM = REPO_ROOT / "fixtures" / "archives_before_layering" / "bilm_lstm.tar.gz"


class MetricsLater(torch.nn.Linear):
    """A model that names no metric before its first batch."""

    def get_metrics(self, reset: bool = False) -> dict[str, float]:
        return {}


def fake_trainer(batches_per_epoch: int = 100) -> SimpleNamespace:
    weight = torch.nn.Parameter(torch.zeros(1))
    return SimpleNamespace(
        data_loader=[None] * batches_per_epoch,
        _validation_data_loader=[{}],
        _total_batches_completed=0,
        optimizer=torch.optim.SGD([weight], lr=1.0),
        model=MetricsLater(1, 1),
    )


def run_checks(callback, trainer, perplexities, monkeypatch, is_primary=True) -> None:
    values = iter(perplexities)
    monkeypatch.setattr(
        elmo_validation_checks,
        "validation_metrics",
        lambda trainer, batches: {"perplexity": next(values)},
    )
    callback.on_start(trainer, is_primary=is_primary)
    for _ in perplexities:
        trainer._total_batches_completed += callback.every_num_batches
        callback.on_batch(
            trainer, [], [], {}, 0, trainer._total_batches_completed, True, is_primary
        )


def test_the_learning_rate_drops_after_lr_patience_checks_without_a_new_best(tmp_path, monkeypatch):
    callback = ValidationChecksCallback(
        str(tmp_path), every_num_batches=5, lr_patience=2, lr_factor=0.5
    )
    trainer = fake_trainer()
    run_checks(callback, trainer, [50.0, 40.0, 41.0, 42.0, 39.0, 45.0, 46.0], monkeypatch)
    assert [c.best for c in callback.history] == [True, True, False, False, True, False, False]
    assert [c.learning_rate for c in callback.history] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    assert [c.batch for c in callback.history] == [5, 10, 15, 20, 25, 30, 35]
    lines = (tmp_path / "validation_checks.jsonl").read_text().splitlines()
    assert [json.loads(line)["metrics"]["perplexity"] for line in lines][-1] == 46.0
    assert (tmp_path / "best_check.th").is_file()


def test_each_check_logs_one_line_with_its_result_and_its_seconds(tmp_path, caplog, monkeypatch):
    callback = ValidationChecksCallback(str(tmp_path), every_num_batches=5)
    with caplog.at_level(logging.INFO):
        run_checks(callback, fake_trainer(), [50.0, 51.0], monkeypatch)
    lines = [r.getMessage() for r in caplog.records if "check at batch" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("elmo_validation_checks: check at batch 5: perplexity 50 (best")
    assert lines[1].startswith("elmo_validation_checks: check at batch 10: perplexity 51 in ")
    for line in lines:
        whole, validation = re.search(r" in (\S+) s \(validation (\S+) s\)$", line).groups()
        assert 0 <= float(validation) <= float(whole)


def test_a_process_other_than_rank_0_decides_the_same_and_writes_nothing(tmp_path, monkeypatch):
    """Even another node's first process, which allennlp calls primary: written once per run."""
    monkeypatch.setattr(elmo_validation_checks, "is_global_primary", lambda: False)
    callback = ValidationChecksCallback(str(tmp_path), every_num_batches=5, lr_patience=1)
    trainer = fake_trainer()
    run_checks(callback, trainer, [50.0, 51.0], monkeypatch, is_primary=True)
    assert [c.learning_rate for c in callback.history] == [1.0, 0.5]
    assert list(tmp_path.iterdir()) == []


def test_the_state_resumes_the_history_and_the_plateau_count(tmp_path, monkeypatch):
    first = ValidationChecksCallback(str(tmp_path), every_num_batches=5, lr_patience=3)
    run_checks(first, fake_trainer(), [50.0, 51.0, 52.0], monkeypatch)
    resumed = ValidationChecksCallback(str(tmp_path), every_num_batches=5, lr_patience=3)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    trainer = fake_trainer()
    trainer._total_batches_completed = 15
    run_checks(resumed, trainer, [53.0], monkeypatch)  # the third check without a new best
    assert resumed.history[-1].learning_rate == 0.5 and resumed.history[-1].batch == 20
    assert len((tmp_path / "validation_checks.jsonl").read_text().splitlines()) == 4


def test_without_validation_data_a_run_has_no_checks_and_says_so(tmp_path, caplog, monkeypatch):
    trainer = fake_trainer()
    trainer._validation_data_loader = None
    callback = ValidationChecksCallback(str(tmp_path), every_num_batches=5)
    monkeypatch.setattr(elmo_validation_checks, "validation_metrics", None)  # never called
    with caplog.at_level(logging.WARNING):
        callback.on_start(trainer)
        trainer._total_batches_completed = 5
        callback.on_batch(trainer, [], [], {}, 0, 5, True)
    assert callback.history == [] and "no validation data: no checks" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_bad_settings_are_one_line_errors_or_a_warning(tmp_path, caplog):
    with pytest.raises(ConfigurationError, match="every_num_batches must be at least 1"):
        ValidationChecksCallback(str(tmp_path), every_num_batches=0)
    with pytest.raises(ConfigurationError, match="must start with - or +"):
        ValidationChecksCallback(str(tmp_path), every_num_batches=5, validation_metric="ppl")
    with caplog.at_level(logging.WARNING):
        ValidationChecksCallback(str(tmp_path), every_num_batches=500).on_start(fake_trainer(100))
    assert "every_num_batches 500 is more than an epoch's 100 batches" in caplog.text


def test_a_metric_the_model_lacks_is_an_error_at_the_start_naming_the_models_metrics(tmp_path):
    """Not hours later at the first check: the biLM names its metrics before any batch."""
    trainer = fake_trainer()
    trainer.model = load_bilm_model(str(BILM))
    callback = ValidationChecksCallback(
        str(tmp_path), every_num_batches=5, validation_metric="-perplexty"
    )
    with pytest.raises(
        ConfigurationError, match=r"no metric 'perplexty' \(it has \[.*'perplexity'.*\]\)"
    ):
        callback.on_start(trainer)
