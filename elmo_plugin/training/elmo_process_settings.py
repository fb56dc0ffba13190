"""TrainerCallback `elmo_process_settings`: holds the run's serialization folder (one training at
a time) and applies `ProcessSettings` once, when training starts. It refuses a trainer key
allennlp would ignore, a sparse softmax that this torch cannot clip or the optimizer would not
update, and a `-r` whose vocabulary is not its checkpoint's. It
also stops the run's log file at a full disk, with one line."""

import contextlib
import hashlib
import json
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any, Optional

import torch
import torch.distributed as dist
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import is_distributed
from allennlp.data import Vocabulary
from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.data.corpus_data_loader import CorpusDataLoader
from elmo_plugin.data.output_file import output_lock
from elmo_plugin.training.log_file import stop_log_files_at_full_disk
from elmo_plugin.training.nodes import writes_node_folder
from elmo_plugin.training.process_settings import ProcessSettings
from elmo_plugin.training.row_gradients import refuse_unapplied_row_gradients
from elmo_plugin.training.sparse_gradient_sync import refuse_unclippable_sparse_gradients
from elmo_plugin.training.trainer_keys import refuse_unknown_trainer_keys

logger = logging.getLogger(__name__)

FOLDER_LOCK = ".elmo_train.lock"  # in the serialization folder while a training writes it


@TrainerCallback.register("elmo_process_settings")
class ElmoProcessSettingsCallback(TrainerCallback):
    """
    Holds the serialization folder from its construction until training ends: a second
    `allennlp train -r` on the folder is refused, naming the process that trains there (see
    `hold_folder`).

    From its construction too, a full disk stops the run's log file (`out.log`) with one error
    line naming it (`log_file`), where Python's logging printed a traceback for every line.

    Sets the process-wide settings of `allennlp train` in `on_start`, before the first batch,
    in every training process (each worker of a distributed run). Our configs list it first in
    `trainer.callbacks`, so `-o '{"trainer.callbacks.0.tf32": true}'` overrides a key. Before the
    first batch it stops, with one line, a run whose trainer config (the run's `config.json`) has
    a key allennlp's trainer would ignore (a misspelt `num_epochs`). Or one whose gradient clipping
    (`trainer.grad_norm`) would fail inside a torch before 2.14 on the sparse softmax's
    gradients, or whose optimizer would not apply the softmax's `row_gradients`; and it warns once
    where a GPU would train on batches of changing shapes. Every checkpoint records the digest of
    the run's vocabulary, and `-r` with another vocabulary (a corpus or tokens file changed since)
    is refused before the first batch.

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
        self.release_folder = hold_folder(self, serialization_dir)
        stop_log_files_at_full_disk(serialization_dir)
        self.settings = ProcessSettings(keep_freed_heap=keep_freed_heap, tf32=tf32)
        self.vocabulary_sha256: Optional[str] = None  # the run's, from on_start
        self.restored_vocabulary_sha256: Optional[str] = None  # its checkpoint's, on -r

    def state_dict(self) -> dict[str, Any]:
        """Saved in every checkpoint: the digest of the vocabulary the run trains with."""
        return {"vocabulary_sha256": self.vocabulary_sha256} if self.vocabulary_sha256 else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.restored_vocabulary_sha256 = state_dict.get("vocabulary_sha256")

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        config = os.path.join(self.serialization_dir, "config.json")
        if os.path.isfile(config):
            with open(config) as file:
                refuse_unknown_trainer_keys(json.load(file).get("trainer", {}))
        refuse_unclippable_sparse_gradients(trainer.model, trainer._grad_norm)
        refuse_unapplied_row_gradients(trainer.model, trainer.optimizer)
        self.vocabulary_sha256 = vocabulary_sha256(trainer.model.vocab)
        restored = self.restored_vocabulary_sha256
        if restored is not None and restored != self.vocabulary_sha256:
            raise ConfigurationError(
                f"allennlp train -r: the vocabulary of {self.serialization_dir} is not the one "
                "its checkpoint was trained with (a corpus or vocabulary file changed since?), "
                "so every row would mean another token; resume with the run's own inputs, or "
                "train into a new folder"
            )
        warn_of_changing_shapes(trainer)
        self.settings.apply()

    def on_end(self, trainer, metrics=None, epoch=None, is_primary: bool = True, **kwargs) -> None:
        super().on_end(trainer, metrics=metrics, epoch=epoch, is_primary=is_primary, **kwargs)
        self.release_folder()


def vocabulary_sha256(vocabulary: Vocabulary) -> str:
    """SHA-256 of every namespace's tokens in index order (what each row of the model means)."""
    digest = hashlib.sha256()
    for namespace in sorted(vocabulary.get_namespaces()):
        tokens = sorted(vocabulary.get_index_to_token_vocabulary(namespace).items())
        digest.update(json.dumps([namespace, [token for _, token in tokens]]).encode())
    return digest.hexdigest()


def hold_folder(owner: object, serialization_dir: str) -> Callable[[], object]:
    """Takes `output_lock` on SERIALIZATION_DIR/.elmo_train.lock in the process that writes the
    folder (`writes_node_folder`: each node's first process, for its node's folder) -> what
    releases it, at the latest when `owner` is collected or the process exits. Where another run
    holds it: a ConfigurationError naming that run's process, in every process of the run.

    Why here: allennlp passes the folder to the checkpointer, then to the callbacks in config
    order, and this callback comes first in every shipped ELMo config. Nothing is written between
    the two. What comes after is held: TensorBoard's `log/`, `-r`'s restore (elmo_checkpointer
    removes checkpoints it will not resume from), checkpoints, metrics. The model is built
    earlier and sees the folder too, but also whenever an archive is loaded. What allennlp writes
    before (`config.json`, `meta.json`, `vocabulary/`, lines of `out.log`) is not held."""
    held = contextlib.ExitStack()
    release = weakref.finalize(owner, held.close)
    refused = None
    if writes_node_folder():
        lock = os.path.join(serialization_dir, FOLDER_LOCK)
        try:
            held.enter_context(output_lock(serialization_dir, lock))
        except ConfigurationError as error:
            refused = str(error)
    refusal = first_refusal(refused)
    if refusal is not None:
        release()
        raise ConfigurationError(refusal)
    return release


def first_refusal(refused: Optional[str]) -> Optional[str]:
    """The first process's refusal of all the run's processes (this one's `refused`), so that
    every node stops, not one alone while the others wait for it."""
    every = [refused]
    if is_distributed():
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, refused)
    return next((message for message in every if message is not None), None)


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
