"""Checkpointer `elmo_checkpointer`: allennlp's checkpointer, safe against a kill mid-save."""

import logging
import os
import zipfile

from allennlp.training.checkpointer import Checkpointer

logger = logging.getLogger(__name__)


@Checkpointer.register("elmo_checkpointer")
class ElmoCheckpointer(Checkpointer):
    """
    allennlp's `default` checkpointer (same arguments, files and behaviour), except that a
    checkpoint counts only when both its files (`model_state_e*_b*.th`, `training_state_e*_b*.th`)
    are complete. allennlp writes them in place, model state first, and `-r` takes the newest
    model state file it finds: a run killed while saving (seconds for a big softmax) left a
    checkpoint that `-r` could not load and that later saves never overwrote. Here `-r` resumes
    from the newest complete checkpoint, and the incomplete one's files are removed with a warning.
    A file is complete when it ends with its zip directory (torch.save writes a zip, that last).

    # Parameters

    Those of allennlp's `default` checkpointer (`save_completed_epochs`,
    `save_every_num_seconds`, `save_every_num_batches`, `keep_most_recent_by_count`,
    `keep_most_recent_by_age`), with the same defaults.
    """

    def _find_all_checkpoints(self) -> set[tuple[int, int]]:
        checkpoints = super()._find_all_checkpoints()
        incomplete = {point for point in checkpoints if not self._is_complete(point)}
        for point in incomplete:
            if self._is_primary:
                logger.warning(
                    "%s: the checkpoint after epoch %d batch %d is incomplete (a run stopped while "
                    "saving it): removed",
                    self._serialization_dir,
                    *point,
                )
                self._remove_checkpoint(*point)
        return checkpoints - incomplete

    def _is_complete(self, point: tuple[int, int]) -> bool:
        paths = (self._model_state_path(*point), self._training_state_path(*point))
        return all(os.path.isfile(path) and zipfile.is_zipfile(path) for path in paths)
