"""elmo_checkpointer: -r resumes from the newest complete checkpoint, and removes one cut short;
across nodes (one folder each) from the newest complete on every node; every node prunes its own
folder; two nodes sharing a folder are refused."""

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from allennlp.common.checks import ConfigurationError
from allennlp.training.checkpointer import Checkpointer
from allennlp.training.trainer import TrainerCheckpoint

from elmo_plugin.training.elmo_checkpointer import ElmoCheckpointer, newest_common_checkpoint
from tests.helpers import join_as_node, run_as_two_nodes


def save_pair(folder, epoch: int, batch: int, value: float) -> None:
    torch.save({"weight": torch.full((64,), value)}, folder / f"model_state_e{epoch}_b{batch}.th")
    torch.save(
        {"batches_in_epoch_completed": batch}, folder / f"training_state_e{epoch}_b{batch}.th"
    )


def cut_short(path, fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction)])


def test_checkpoints_cut_short_are_skipped_and_removed_and_complete_ones_load(tmp_path):
    save_pair(tmp_path, 0, 3, 3.0)
    save_pair(tmp_path, 0, 6, 6.0)
    (tmp_path / "training_state_e0_b6.th").unlink()  # killed between the two files
    save_pair(tmp_path, 0, 9, 9.0)
    cut_short(tmp_path / "training_state_e0_b9.th")  # killed while writing the training state
    save_pair(tmp_path, 1, 2, 12.0)
    cut_short(tmp_path / "model_state_e1_b2.th", 0.9)  # killed while writing the model state
    (tmp_path / "training_state_e1_b2.th").unlink()
    # allennlp's own checkpointer picks the newest model state file and cannot load it
    assert Checkpointer(str(tmp_path)).find_latest_checkpoint()[0].endswith("model_state_e1_b2.th")

    checkpoint = ElmoCheckpointer(str(tmp_path)).load_checkpoint()

    assert torch.equal(checkpoint.model_state["weight"], torch.full((64,), 3.0))
    assert checkpoint.trainer_state == {"batches_in_epoch_completed": 3}
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "model_state_e0_b3.th",
        "training_state_e0_b3.th",
    ]


def test_without_checkpoints_there_is_nothing_to_load(tmp_path):
    assert ElmoCheckpointer(str(tmp_path)).load_checkpoint() is None


def test_the_checkpoint_to_resume_is_the_newest_that_every_rank_has():
    assert newest_common_checkpoint([{(0, 3), (0, 6), (1, 2)}, {(0, 3), (0, 6)}]) == (0, 6)
    assert newest_common_checkpoint([{(0, 6)}, {(0, 3)}]) is None
    assert newest_common_checkpoint([set(), set()]) is None


def saving_trainer(batch: int, writes: bool = True) -> SimpleNamespace:
    """As allennlp's trainer: the state to save, or None in a process that does not write."""
    state = {"epochs_completed": 0, "batches_in_epoch_completed": batch}
    checkpoint = TrainerCheckpoint({"weight": torch.zeros(4)}, state) if writes else None
    return SimpleNamespace(get_checkpoint_state=lambda: checkpoint)


def as_node(rank: int, root: str, port: int) -> None:
    """One process per node (as allennlp's workers with `cuda_devices: [-1]` on two nodes), each
    with its own folders under `root`; what it saw goes to root/rank{R}.json."""
    join_as_node(rank, port)
    folder = Path(root) / f"resume{rank}"
    checkpoint = ElmoCheckpointer(str(folder)).load_checkpoint()
    assert checkpoint is not None
    pruned = ElmoCheckpointer(str(Path(root) / f"prune{rank}"), keep_most_recent_by_count=2)
    for batch in range(1, 5):
        pruned.save_checkpoint(saving_trainer(batch))
    os.environ["ALLENNLP_PROCS_PER_NODE"] = "2"  # now one node of two processes: rank 1 reads
    schedule = ElmoCheckpointer(str(Path(root) / "one_node"), save_every_num_batches=3)
    saved_after = [
        batch
        for batch in range(1, 8)
        if schedule.maybe_save_checkpoint(saving_trainer(batch, writes=rank == 0), 0, batch)
    ]
    os.environ["ALLENNLP_PROCS_PER_NODE"] = "1"
    try:
        ElmoCheckpointer(str(Path(root) / "shared")).load_checkpoint()
        refused = ""
    except ConfigurationError as error:
        refused = str(error)
    result = {
        "resumed_at": checkpoint.trainer_state["batches_in_epoch_completed"],
        "left": sorted(path.name for path in folder.iterdir()),
        "pruned_to": sorted(path.name for path in (Path(root) / f"prune{rank}").iterdir()),
        "refused": refused,
        "saved_after": saved_after,
    }
    (Path(root) / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_two_nodes_resume_from_the_newest_checkpoint_both_folders_hold_complete(tmp_path):
    """Node 0's folder holds complete checkpoints after batches 3 and 6, node 1's only the one
    after batch 3 (its batch 6 cut short): both resume from batch 3 and node 0's batch 6 is
    removed (a resumed run saves batch 6 again). Every node prunes its own folder to
    keep_most_recent_by_count (allennlp pruned node 0's only); a process that writes nothing
    keeps the writer's saving schedule; and two nodes writing one folder are refused."""
    for rank in range(2):
        (tmp_path / f"resume{rank}").mkdir()
        (tmp_path / f"prune{rank}").mkdir()
        save_pair(tmp_path / f"resume{rank}", 0, 3, 3.0)
        save_pair(tmp_path / f"resume{rank}", 0, 6, 6.0)
    cut_short(tmp_path / "resume1" / "training_state_e0_b6.th")
    (tmp_path / "shared").mkdir()
    (tmp_path / "one_node").mkdir()
    run_as_two_nodes("tests.training.test_elmo_checkpointer", tmp_path)
    for rank in range(2):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["resumed_at"] == 3
        assert result["left"] == ["model_state_e0_b3.th", "training_state_e0_b3.th"]
        assert result["pruned_to"] == [
            f"{kind}_state_e0_b{batch}.th" for kind in ("model", "training") for batch in (3, 4)
        ]
        assert result["saved_after"] == [3, 6]  # allennlp's rank 1 "saved" after 3, 4, 5, ...
        assert result["refused"] == (
            f"elmo_checkpointer: nodes 0 and 1 write the same serialization folder "
            f"{tmp_path / 'shared'}: give each node a folder of its own (docs/scaling.md)"
        )
    assert list((tmp_path / "shared").iterdir()) == []  # the markers are gone


if __name__ == "__main__":
    mp.spawn(as_node, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)
