"""`allennlp elmo-plan`: the figures of a real training step of the config, nothing written,
one-line errors for a config that cannot be built, does not fit, kills its steps, or clips what
this torch cannot."""

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands import elmo_plan
from elmo_plugin.training import sparse_gradient_sync
from tests.cli.test_exact_resume_cli import CONFIG, SAVED_AT, shrunk_original
from tests.helpers import overrides, run_allennlp, run_allennlp_in_process


def test_the_plan_measures_the_configs_steps_and_its_checkpoint_size(
    tiny_corpus, tmp_path, plugin_cwd
):
    values = shrunk_original(tiny_corpus, num_workers=0, processes=1)
    checks = {"type": "elmo_validation_checks", "every_num_batches": 4, "max_batches": 2}
    values["trainer.callbacks"] = [{"type": "elmo_corpus_resume"}, checks]
    values["trainer.num_epochs"] = 1
    before = sorted(plugin_cwd.iterdir())
    result = run_allennlp_in_process(["elmo-plan", CONFIG, "-o", overrides(values)], cwd=plugin_cwd)
    assert sorted(plugin_cwd.iterdir()) == before  # nothing written
    plan = json.loads(result.stdout.strip().splitlines()[-1])
    assert plan["device"] == "cpu" and plan["tokens_per_second"] > 0
    batches = plan["batches_per_epoch"]
    assert plan["batches_per_epoch_is_estimate"] and batches > 0
    # the epoch as allennlp's "Epoch duration" counts it, part by part
    parts, validation = plan["epoch_parts"], plan["validation_seconds_per_batch"]
    assert parts["training"] == pytest.approx(plan["seconds_per_batch"] * batches)
    assert parts["validation_checks"] == pytest.approx(batches // 4 * 2 * validation)
    assert parts["validation"] == pytest.approx(plan["validation_batches"] * validation)
    saves = batches // SAVED_AT + 1  # save_every_num_batches, and the epoch's end
    assert parts["checkpoints"] == pytest.approx(saves * plan["checkpoint_seconds"])
    assert plan["epoch_seconds"] == pytest.approx(sum(parts.values()))
    assert plan["run_seconds"] == pytest.approx(plan["epoch_seconds"])  # one epoch
    assert "one epoch:" in result.stdout and "tokens/s:" in result.stdout
    assert "the first epoch: training " in result.stdout
    # one checkpoint as allennlp writes it: the model state and the training state
    run_allennlp_in_process(["train", CONFIG, "-s", str(tmp_path / "run"), "-o", overrides(values)])
    written = sum(
        (tmp_path / "run" / f"{kind}_state_e1_b0.th").stat().st_size  # the epoch's end
        for kind in ("model", "training")
    )
    assert plan["checkpoint_bytes"] == pytest.approx(written, rel=0.1)


def test_a_config_that_cannot_be_built_is_one_line(plugin_cwd, tiny_corpus):
    values = {**shrunk_original(tiny_corpus, 0, 1), "model.no_such_key": 1}
    result = run_allennlp(
        ["elmo-plan", CONFIG, "-o", overrides(values)], cwd=plugin_cwd, check=False
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("allennlp elmo-plan: error: ") and "no_such_key" in last
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "override, error",
    [
        (
            '{"trainer.num_epoch": 1}',
            "trainer.num_epoch is not a key of allennlp's trainer, which would ignore it; did "
            "you mean trainer.num_epochs?",
        ),
        ('{"trainer.num_epochs": 1', "-o does not parse: "),
    ],
)
def test_a_misspelt_trainer_key_or_an_o_that_does_not_parse_is_one_line_naming_it(
    plugin_cwd, override, error
):
    result = run_allennlp(["elmo-plan", CONFIG, "-o", override], cwd=plugin_cwd, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"allennlp elmo-plan: error: {error}"), last


def test_a_torch_that_cannot_clip_the_sparse_softmax_is_the_trainers_one_line(
    plugin_cwd, tiny_corpus, monkeypatch
):
    monkeypatch.setattr(sparse_gradient_sync, "torch_norms_sparse_gradients", lambda: False)
    values = shrunk_original(tiny_corpus, 0, 1)
    values["trainer.callbacks"] = [{"type": "elmo_corpus_resume"}]
    values["model.row_gradients"] = False  # sparse tensors
    result = run_allennlp_in_process(
        ["elmo-plan", CONFIG, "-o", overrides(values)], cwd=plugin_cwd, check=False
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"allennlp elmo-plan: error: {CONFIG}: trainer.grad_norm: torch {torch.__version__} "
        "cannot clip the sparse gradients of _softmax_loss.softmax_w.weight"
    )


def test_an_optimizer_that_would_not_apply_row_gradients_is_the_trainers_one_line(
    plugin_cwd, tiny_corpus
):
    values = shrunk_original(tiny_corpus, 0, 1)
    values["trainer.callbacks"] = [{"type": "elmo_corpus_resume"}]
    values["trainer.optimizer.type"] = "adagrad"  # allennlp's: the rows would be its own
    result = run_allennlp_in_process(
        ["elmo-plan", CONFIG, "-o", overrides(values)], cwd=plugin_cwd, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"allennlp elmo-plan: error: {CONFIG}: trainer.optimizer: AdagradOptimizer would not "
        "update the softmax of model.row_gradients: true (_softmax_loss.touched.rows_0); use "
        "elmo_adagrad or fused_adam, or set model.row_gradients to false"
    )


def test_parameters_and_optimizer_state_beyond_the_free_memory_are_named(monkeypatch):
    model = torch.nn.Linear(1024, 1024)  # 4 MiB of parameters
    monkeypatch.setattr(elmo_plan, "available_memory", lambda device: 10 << 20)
    with pytest.raises(ConfigurationError, match=r"adam optimizer's state need 0.0 GiB") as error:
        elmo_plan.fits_or_raise(model, "adam", -1)
    assert "memory has 0.0 GiB free" in str(error.value)
    elmo_plan.fits_or_raise(model, "sgd", -1)  # parameters + gradients, 8 MiB, fit


def test_steps_killed_by_the_system_become_a_one_line_error(monkeypatch):
    monkeypatch.setattr(elmo_plan, "measure", lambda *args: os.kill(os.getpid(), signal.SIGKILL))
    config = Path(__file__).parents[2] / "training_config" / "elmo_lstm.jsonnet"
    with pytest.raises(ConfigurationError, match="killed by SIGKILL") as error:
        elmo_plan.plan_config(str(config), "", 0, 1)
    assert "does not fit this machine" in str(error.value)
