"""Trainer callback `elmo_tensorboard`: allennlp's `tensorboard` callback, written once per run,
stopped by a full disk with one error."""

import os
from typing import Any, Optional

import torch
from allennlp.common.util import is_global_primary
from allennlp.data.data_loaders.data_loader import TensorDict
from allennlp.training.callbacks.callback import TrainerCallback
from allennlp.training.callbacks.log_writer import LogWriterCallback
from allennlp.training.callbacks.tensorboard import TensorBoardCallback

from elmo_plugin.training.event_file import EventFile


@TrainerCallback.register("elmo_tensorboard")
class ElmoTensorBoardCallback(TensorBoardCallback):
    """
    allennlp's `tensorboard` callback (the same keys, event files and curves in
    `SERIALIZATION_DIR/log/{train,validation}`), written by rank 0 only. allennlp's writes on the
    first process of every node, so a multi-node run had a copy of every curve in every node's
    folder, and its writers open an event file in every process. A full disk stops the run with
    one DiskFull naming the event file (`EventFile`), where allennlp's writer thread died with a
    traceback and training then waited on it for good. With `distribution_interval`, the
    parameters are also kept before the first batch trained (of a run, or after `-r`), so that its
    updates can be logged: allennlp's callback keeps them only after a batch (an AssertionError).

    # Parameters

    serialization_dir : `str`
        Given by allennlp: the run's folder.
    summary_interval : `int`, optional (default = `100`)
        Batches between two points of the batch curves.
    distribution_interval : `int`, optional (default = `None`)
        Batches between two histograms of activations and parameter updates; `None`: none.
    batch_size_interval : `int`, optional (default = `None`)
        Batches between two logs of the batch size; `None`: none.
    should_log_parameter_statistics : `bool`, optional (default = `False`)
        Log each parameter's and gradient's mean and standard deviation.
    should_log_learning_rate : `bool`, optional (default = `False`)
        Log each parameter group's learning rate.
    """

    def __init__(
        self,
        serialization_dir: str,
        summary_interval: int = 100,
        distribution_interval: Optional[int] = None,
        batch_size_interval: Optional[int] = None,
        should_log_parameter_statistics: bool = False,
        should_log_learning_rate: bool = False,
    ) -> None:
        # allennlp's base class: the writers are ours, on rank 0 (close() skips missing ones)
        LogWriterCallback.__init__(
            self,
            serialization_dir,
            summary_interval,
            distribution_interval,
            batch_size_interval,
            should_log_parameter_statistics,
            should_log_learning_rate,
        )
        writes = is_global_primary()
        self._train_log = self._events("train") if writes else None
        self._validation_log = self._events("validation") if writes else None

    def _events(self, run: str) -> EventFile:
        return EventFile(os.path.join(self.serialization_dir, "log", run))

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_global_primary(), **kwargs)

    def on_backward(self, trainer, batch_outputs, backward_called: bool, **kwargs) -> bool:
        """Before the step of a batch whose updates are logged, the parameters, where allennlp's
        callback kept none after the batch before (none was trained: the run just started or
        resumed)."""
        logged = self._should_log_distributions_next_batch()  # the count is this batch's - 1
        if logged and self._param_updates is None and is_global_primary():
            self._param_updates = parameters_now(trainer.model)
        return False

    def on_batch(
        self,
        trainer,
        batch_inputs: list[TensorDict],
        batch_outputs: list[dict[str, Any]],
        batch_metrics: dict[str, Any],
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        batch_grad_norm: Optional[float] = None,
        **kwargs,
    ) -> None:
        super().on_batch(
            trainer,
            batch_inputs,
            batch_outputs,
            batch_metrics,
            epoch,
            batch_number,
            is_training,
            is_primary=is_global_primary(),
            batch_grad_norm=batch_grad_norm,
            **kwargs,
        )

    def on_epoch(
        self, trainer, metrics: dict[str, Any], epoch: int, is_primary: bool = True, **kwargs
    ) -> None:
        super().on_epoch(trainer, metrics, epoch, is_primary=is_global_primary(), **kwargs)

    def on_end(self, trainer, metrics=None, epoch=None, is_primary: bool = True, **kwargs) -> None:
        super().on_end(trainer, metrics, epoch, is_primary=is_global_primary(), **kwargs)


def parameters_now(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of every parameter of `model` on the CPU, by name (what allennlp's callback keeps
    after a batch to log the next batch's updates)."""
    return {name: param.detach().cpu().clone() for name, param in model.named_parameters()}
