"""Trainer callback `elmo_tensorboard`: allennlp's `tensorboard` callback, written once per run."""

from typing import Any, Optional

from allennlp.common.util import is_global_primary
from allennlp.training.callbacks.callback import TrainerCallback
from allennlp.training.callbacks.log_writer import LogWriterCallback
from allennlp.training.callbacks.tensorboard import TensorBoardCallback


@TrainerCallback.register("elmo_tensorboard")
class ElmoTensorBoardCallback(TensorBoardCallback):
    """
    allennlp's `tensorboard` callback (the same keys, event files and curves in
    `SERIALIZATION_DIR/log/{train,validation}`), written by rank 0 only. allennlp's writes on the
    first process of every node, so a multi-node run had a copy of every curve in every node's
    folder, and its writers open an event file in every process.

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
        options = dict(
            summary_interval=summary_interval,
            distribution_interval=distribution_interval,
            batch_size_interval=batch_size_interval,
            should_log_parameter_statistics=should_log_parameter_statistics,
            should_log_learning_rate=should_log_learning_rate,
        )
        if is_global_primary():
            super().__init__(serialization_dir, **options)
        else:  # allennlp's base class without the writers (close() skips missing ones)
            LogWriterCallback.__init__(self, serialization_dir, **options)
            self._train_log = self._validation_log = None

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_global_primary(), **kwargs)

    def on_batch(self, *args, is_primary: bool = True, **kwargs) -> None:
        super().on_batch(*args, is_primary=is_global_primary(), **kwargs)

    def on_epoch(self, *args, is_primary: bool = True, **kwargs) -> None:
        super().on_epoch(*args, is_primary=is_global_primary(), **kwargs)

    def on_end(self, *args: Any, is_primary: bool = True, **kwargs) -> None:
        super().on_end(*args, is_primary=is_global_primary(), **kwargs)
