"""TrainerCallback `elmo_process_settings`: applies `ProcessSettings` once, when training starts,
and refuses a trainer key allennlp would ignore, a sparse softmax that this torch cannot clip or
the optimizer would not update."""

import json
import logging
import os
from typing import Optional

import torch
from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.data.corpus_data_loader import CorpusDataLoader
from elmo_plugin.training.process_settings import ProcessSettings
from elmo_plugin.training.row_gradients import refuse_unapplied_row_gradients
from elmo_plugin.training.sparse_gradient_sync import refuse_unclippable_sparse_gradients
from elmo_plugin.training.trainer_keys import refuse_unknown_trainer_keys

logger = logging.getLogger(__name__)


@TrainerCallback.register("elmo_process_settings")
class ElmoProcessSettingsCallback(TrainerCallback):
    """
    Sets the process-wide settings of `allennlp train` in `on_start`, before the first batch,
    in every training process (each worker of a distributed run). Our configs list it first in
    `trainer.callbacks`, so `-o '{"trainer.callbacks.0.tf32": true}'` overrides a key. Before the
    first batch it stops, with one line, a run whose trainer config (the run's `config.json`) has
    a key allennlp's trainer would ignore (a misspelt `num_epochs`). Or one whose gradient clipping
    (`trainer.grad_norm`) would fail inside a torch before 2.14 on the sparse softmax's
    gradients, or whose optimizer would not apply the softmax's `row_gradients`; and it warns once
    where a GPU would train on batches of changing shapes.

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
        config = os.path.join(self.serialization_dir, "config.json")
        if os.path.isfile(config):
            with open(config) as file:
                refuse_unknown_trainer_keys(json.load(file).get("trainer", {}))
        refuse_unclippable_sparse_gradients(trainer.model, trainer._grad_norm)
        refuse_unapplied_row_gradients(trainer.model, trainer.optimizer)
        warn_of_changing_shapes(trainer)
        self.settings.apply()


def warn_of_changing_shapes(trainer) -> None:
    """One warning where a GPU trains on `elmo_corpus` / `elmo_streams` batches whose shape
    changes from batch to batch (`fixed_shape: false`): each new shape costs the step host time
    (new kernels, compilation), where one fixed shape would cost none."""
    loader = trainer.data_loader
    if (
        torch.device(trainer.cuda_device).type == "cuda"
        and isinstance(loader, CorpusDataLoader)
        and loader.fixed_timesteps is None
    ):
        logger.warning(
            "%s: batches change shape from one to the next (fixed_shape: false), and each new "
            "shape costs the GPU step host time: set data_loader.fixed_shape to true",
            loader.name,
        )
