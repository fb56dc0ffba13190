"""TrainerCallback `elmo_process_settings`: applies `ProcessSettings` once, when training starts,
and refuses a sparse softmax that this torch cannot clip or the optimizer would not update."""

from typing import Optional

from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.training.process_settings import ProcessSettings
from elmo_plugin.training.row_gradients import refuse_unapplied_row_gradients
from elmo_plugin.training.sparse_gradient_sync import refuse_unclippable_sparse_gradients


@TrainerCallback.register("elmo_process_settings")
class ElmoProcessSettingsCallback(TrainerCallback):
    """
    Sets the process-wide settings of `allennlp train` in `on_start`, before the first batch,
    in every training process (each worker of a distributed run). Our configs list it first in
    `trainer.callbacks`, so `-o '{"trainer.callbacks.0.tf32": true}'` overrides a key. It also
    stops a run whose gradient clipping (`trainer.grad_norm`) would fail inside a torch before
    2.14 on the sparse softmax's gradients, or whose optimizer would not apply the softmax's
    `row_gradients`, with one line, before the first batch.

    # Parameters

    keep_freed_heap : `bool`, optional (default = `True`)
        Keep freed CPU memory in the process (glibc's heap thresholds): see `ProcessSettings`.
    tf32 : `bool`, optional (default = `None`)
        Let (or stop) float32 matmuls and convolutions use TF32; unset: torch's defaults.
    """

    def __init__(
        self, serialization_dir: str, keep_freed_heap: bool = True, tf32: Optional[bool] = None
    ) -> None:
        super().__init__(serialization_dir)
        self.settings = ProcessSettings(keep_freed_heap=keep_freed_heap, tf32=tf32)

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        refuse_unclippable_sparse_gradients(trainer.model, trainer._grad_norm)
        refuse_unapplied_row_gradients(trainer.model, trainer.optimizer)
        self.settings.apply()
