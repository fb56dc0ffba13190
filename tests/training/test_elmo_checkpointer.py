"""elmo_checkpointer: -r resumes from the newest complete checkpoint, and removes one cut short."""

import torch
from allennlp.training.checkpointer import Checkpointer

from elmo_plugin.training.elmo_checkpointer import ElmoCheckpointer


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
