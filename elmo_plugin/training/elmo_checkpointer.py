"""Checkpointer `elmo_checkpointer`: allennlp's checkpointer, safe against a kill or a full disk
mid-save, and consistent across the nodes of a multi-node run (one serialization folder per
node)."""

import logging
import os
import secrets
import time
import zipfile
from typing import Optional

import torch
import torch.distributed as dist
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import is_distributed
from allennlp.nn import util as nn_util
from allennlp.training.checkpointer import Checkpointer
from allennlp.training.trainer import TrainerCheckpoint

from elmo_plugin.data.output_file import OutputFile, create_exclusively
from elmo_plugin.training.nodes import node_of, writes_node_folder

logger = logging.getLogger(__name__)

Point = tuple[int, int]  # (epochs completed, batches completed in the epoch)


@Checkpointer.register("elmo_checkpointer")
class ElmoCheckpointer(Checkpointer):
    """
    allennlp's `default` checkpointer (same arguments and files), except:

    - Each checkpoint file (`model_state_e*_b*.th`, `training_state_e*_b*.th`, and so `best.th`,
      allennlp's hard link to the model state) is written whole (`OutputFile`: a temporary file
      renamed when complete). A full disk is one error naming the file (DiskFull). allennlp
      writes them in place, where a kill or a full disk left a file cut short.
    - A checkpoint counts only when both its files are there and complete (each ends with its
      zip directory, which torch.save writes last: a folder written in place may hold a cut
      file). `-r` resumes from the newest complete checkpoint and removes the incomplete one's
      files with a warning (allennlp's took the newest model state file, even a cut one).
    - Several nodes, one serialization folder each (allennlp's trainer saves checkpoints on
      every node's first process). `-r` on every node resumes from the newest checkpoint that is
      complete on every node and logs which; newer checkpoints (complete on some nodes only) are
      removed. Every node prunes its own folder to `keep_most_recent_by_count` /
      `keep_most_recent_by_age` (allennlp pruned only node 0's), and only after every node has
      finished saving, so the newest checkpoint common to all nodes is never pruned. Every
      process keeps the same saving schedule (allennlp's moved on only in the processes that
      write). Two nodes sharing one folder are refused at the start.

    # Parameters

    Those of allennlp's `default` checkpointer (`save_completed_epochs`,
    `save_every_num_seconds`, `save_every_num_batches`, `keep_most_recent_by_count`,
    `keep_most_recent_by_age`), with the same defaults.
    """

    @property
    def _is_primary(self) -> bool:
        """Whether this process writes (and prunes) its node's folder."""
        return writes_node_folder()

    def _find_all_checkpoints(self) -> set[Point]:
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

    def _is_complete(self, point: Point) -> bool:
        paths = (self._model_state_path(*point), self._training_state_path(*point))
        return all(os.path.isfile(path) and zipfile.is_zipfile(path) for path in paths)

    # --- resume ---

    def load_checkpoint(self) -> Optional[TrainerCheckpoint]:
        point = self._checkpoint_to_resume()
        if point is None:
            return None
        return TrainerCheckpoint(
            *(
                torch.load(path, map_location=nn_util.device_mapping(-1))
                for path in (self._model_state_path(*point), self._training_state_path(*point))
            )
        )

    def _checkpoint_to_resume(self) -> Optional[Point]:
        """The newest checkpoint complete in every process's folder; newer ones here removed."""
        here = self._find_all_checkpoints()
        if not is_distributed():
            return max(here, default=None)
        every_rank = self._gather_folders(here)
        chosen = newest_common_checkpoint(every_rank)
        if chosen is None and any(every_rank):
            raise ConfigurationError(
                f"elmo_checkpointer: no checkpoint is complete on every node "
                f"({describe_checkpoints(every_rank)}): resume needs one"
            )
        newer = sorted(point for point in here if chosen is None or point > chosen)
        if chosen is not None and dist.get_rank() == 0:
            logger.info(
                "elmo_checkpointer: resuming from the checkpoint after epoch %d batch %d, the "
                "newest complete on every node (%s)",
                *chosen,
                describe_checkpoints(every_rank),
            )
        if newer and self._is_primary:
            logger.warning(
                "elmo_checkpointer: %s: removed %s, newer than the checkpoint every node has",
                self._serialization_dir,
                ", ".join(f"e{epoch}_b{batch}" for epoch, batch in newer),
            )
            for point in newer:
                self._remove_checkpoint(*point)
        return chosen

    def _gather_folders(self, here: set[Point]) -> list[set[Point]]:
        """Every rank's complete checkpoints; refuses a folder written by two nodes (each node's
        writer leaves a marker named by a fresh token, then looks for other nodes' markers)."""
        token = secrets.token_hex(8)
        marker = os.path.join(self._serialization_dir, f".node_marker_{token}")
        if self._is_primary:
            create_exclusively(marker)
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (token, sorted(here)))
        seen = [rank for rank, (other, _) in enumerate(gathered) if self._sees(other)]
        shared: list = [None] * dist.get_world_size()
        dist.all_gather_object(shared, sorted({node_of(rank) for rank in seen}))
        if self._is_primary:
            os.remove(marker)
        for nodes in shared:
            if len(nodes) > 1:
                raise ConfigurationError(
                    f"elmo_checkpointer: nodes {' and '.join(map(str, nodes))} write the same "
                    f"serialization folder {self._serialization_dir}: give each node a folder of "
                    "its own (docs/scaling.md)"
                )
        return [set(map(tuple, points)) for _, points in gathered]

    def _sees(self, token: str) -> bool:
        return self._is_primary and os.path.exists(
            os.path.join(self._serialization_dir, f".node_marker_{token}")
        )

    # --- save and prune ---

    def maybe_save_checkpoint(
        self, trainer, num_epochs_completed: int, num_batches_in_epoch_completed: int
    ) -> bool:
        saved = super().maybe_save_checkpoint(
            trainer, num_epochs_completed, num_batches_in_epoch_completed
        )
        if saved:  # in every process (allennlp's save moved it on only where it wrote)
            self._last_save_num_epochs_completed = num_epochs_completed
            self._last_save_num_batches_in_epoch_completed = num_batches_in_epoch_completed
        return saved

    def save_checkpoint(self, trainer) -> None:
        """The trainer's state in allennlp's two files (each written whole, and only where it is
        missing, as allennlp's), then, once every process has saved, the pruning of every node's
        folder."""
        state = trainer.get_checkpoint_state()
        if state is not None:  # None: a process that does not write
            point = (
                state.trainer_state["epochs_completed"],
                state.trainer_state["batches_in_epoch_completed"],
            )
            save_whole(state.model_state, self._model_state_path(*point))
            save_whole(state.trainer_state, self._training_state_path(*point))
        self._last_save_time = time.time()
        if is_distributed():
            dist.barrier()
        if self._is_primary:
            self._prune()

    def _prune(self) -> None:
        by_count, by_age = self._keep_most_recent_by_count, self._keep_most_recent_by_age
        if by_count is None and by_age is None:
            return
        checkpoints = sorted(self._find_all_checkpoints(), reverse=True)
        keep = set(checkpoints[:by_count]) if by_count is not None else set()
        if by_age is not None:
            now = time.time()
            keep |= {point for point in checkpoints if now - self._saved_at(point) <= by_age}
        for point in set(checkpoints) - keep:
            self._remove_checkpoint(*point)

    def _saved_at(self, point: Point) -> float:
        paths = (self._model_state_path(*point), self._training_state_path(*point))
        return max(os.path.getmtime(path) for path in paths)


def save_whole(state: dict, path: str) -> None:
    """`torch.save(state, path)` into a temporary file renamed to `path` when complete; nothing
    when `path` exists."""
    if not os.path.isfile(path):
        with OutputFile(path, mode="wb") as output:
            torch.save(state, output.file)


def newest_common_checkpoint(every_rank: list[set[Point]]) -> Optional[Point]:
    """The newest checkpoint in every set (one set of complete checkpoints per rank), if any."""
    common = set.intersection(*every_rank) if every_rank else set()
    return max(common, default=None)


def describe_checkpoints(every_rank: list[set[Point]]) -> str:
    """'node 0: e0_b40, e0_b20; node 1: e0_b20' (each node once: its ranks share a folder)."""
    nodes: dict[int, set[Point]] = {}
    for rank, points in enumerate(every_rank):
        nodes.setdefault(node_of(rank), points)
    return "; ".join(
        f"node {node}: "
        + (", ".join(f"e{e}_b{b}" for e, b in sorted(points, reverse=True)) or "none")
        for node, points in sorted(nodes.items())
    )
