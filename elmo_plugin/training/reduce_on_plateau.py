"""LearningRateScheduler `reduce_on_plateau`: allennlp's, buildable on this torch.

allennlp 2.10.1's `reduce_on_plateau` passes `verbose` to torch's `ReduceLROnPlateau`, which
torch 2.7 and later no longer take: a config naming it failed when the trainer was built. This
registration takes allennlp's name and keys."""

from typing import Literal, Union

import torch
from allennlp.training.learning_rate_schedulers import LearningRateScheduler
from allennlp.training.learning_rate_schedulers.pytorch_lr_schedulers import (
    ReduceOnPlateauLearningRateScheduler,
    _PyTorchLearningRateSchedulerWithMetricsWrapper,
)


@LearningRateScheduler.register("reduce_on_plateau", exist_ok=True)
class ReduceOnPlateau(ReduceOnPlateauLearningRateScheduler):
    """
    allennlp's `reduce_on_plateau`, the same config keys (torch's `ReduceLROnPlateau`: the rate
    times `factor` after `patience` epochs whose validation metric did not improve by
    `threshold`). `verbose` is accepted and ignored (torch no longer prints the rates).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        mode: Literal["min", "max"] = "min",
        factor: float = 0.1,
        patience: int = 10,
        verbose: bool = False,
        threshold_mode: Literal["rel", "abs"] = "rel",
        threshold: float = 1e-4,
        cooldown: int = 0,
        min_lr: Union[float, list[float]] = 0,
        eps: float = 1e-8,
    ) -> None:
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode=mode,
            factor=factor,
            patience=patience,
            threshold_mode=threshold_mode,
            threshold=threshold,
            cooldown=cooldown,
            min_lr=min_lr,
            eps=eps,
        )
        # as allennlp's own: torch's ReduceLROnPlateau is no _LRScheduler in the stubs
        _PyTorchLearningRateSchedulerWithMetricsWrapper.__init__(self, scheduler)  # type: ignore[arg-type]
