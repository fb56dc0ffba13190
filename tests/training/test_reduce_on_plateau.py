"""`reduce_on_plateau` (allennlp's name and keys) builds on this torch and lowers the rate after
`patience` epochs without improvement: as torch's own scheduler, and through `allennlp train`."""

import json

import torch
from allennlp.common import Params
from allennlp.training.learning_rate_schedulers import LearningRateScheduler

from tests.helpers import CONFIG_DIR, run_allennlp_in_process, train_args

NEVER_BETTER = {  # an epoch improves only by more than 1.0 accuracy: never, after the first
    "type": "reduce_on_plateau",
    "mode": "max",
    "factor": 0.5,
    "patience": 0,
    "threshold_mode": "abs",
    "threshold": 1.0,
    "verbose": True,
}


def test_the_rate_halves_after_each_epoch_without_improvement_as_torchs_scheduler():
    weights = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weights], lr=0.8)
    scheduler = LearningRateScheduler.from_params(Params(dict(NEVER_BETTER)), optimizer=optimizer)
    reference = torch.optim.lr_scheduler.ReduceLROnPlateau(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.8),
        mode="max",
        factor=0.5,
        patience=0,
        threshold_mode="abs",
        threshold=1.0,
    )
    for accuracy in (0.5, 0.9, 0.95):
        scheduler.step(accuracy)
        reference.step(accuracy)
    assert optimizer.param_groups[0]["lr"] == reference.get_last_lr()[0] == 0.2
    assert scheduler.state_dict()["num_bad_epochs"] == 0 and scheduler.lr_scheduler.best == 0.5


def test_allennlp_train_with_reduce_on_plateau_lowers_the_rate_each_epoch(
    tiny_tagged_data, plugin_cwd
):
    """pos_tagger_baseline, 3 epochs at lr 0.01: 0.01 x 0.5 x 0.5 at the end."""
    values = {
        "train_data_path": str(tiny_tagged_data / "train.conllu"),
        "validation_data_path": str(tiny_tagged_data / "valid.conllu"),
        "trainer.num_epochs": 3,
        "trainer.optimizer.lr": 0.01,
        "data_loader.batch_sampler.batch_size": 32,
        "trainer.learning_rate_scheduler": NEVER_BETTER,
    }
    run_allennlp_in_process(
        train_args(CONFIG_DIR / "pos_tagger_baseline.jsonnet", "out", values), cwd=plugin_cwd
    )
    (state,) = sorted((plugin_cwd / "out").glob("training_state_e*.th"))[-1:]
    training = torch.load(state, weights_only=False)
    assert training["optimizer"]["param_groups"][0]["lr"] == 0.01 * 0.5 * 0.5
    config = json.loads((plugin_cwd / "out" / "config.json").read_text())
    assert config["trainer"]["learning_rate_scheduler"]["type"] == "reduce_on_plateau"
