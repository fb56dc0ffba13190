"""`elmo_process_settings` holds the run's serialization folder on each node's first process:
two nodes with folders of their own hold one each; two nodes pointed at one folder both stop at
the start with the lock's line, not one alone while the other waits for it."""

import json
import sys
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp
from allennlp.common.checks import ConfigurationError

from elmo_plugin.training.elmo_process_settings import FOLDER_LOCK, ElmoProcessSettingsCallback
from tests.helpers import join_as_node, run_as_two_nodes


def as_node(rank: int, root: str, port: int) -> None:
    """One process per node (allennlp's workers with one device on each of two nodes) builds the
    callback for its own folder root/node{R}, then for root/shared; what it saw goes to
    root/rank{R}.json."""
    join_as_node(rank, port)
    own = Path(root) / f"node{rank}"
    callback = ElmoProcessSettingsCallback(str(own))
    held = (own / FOLDER_LOCK).read_text()
    try:
        ElmoProcessSettingsCallback(str(Path(root) / "shared"))
        refused = ""
    except ConfigurationError as error:
        refused = str(error)
    callback.release_folder()
    result = {"held": held, "released": not (own / FOLDER_LOCK).exists(), "refused": refused}
    (Path(root) / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_each_node_holds_its_folder_and_a_shared_folder_stops_every_node(tmp_path):
    for folder in ("node0", "node1", "shared"):
        (tmp_path / folder).mkdir()
    run_as_two_nodes("tests.training.test_training_folder_lock", tmp_path)
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    holders = {result["held"].split()[-1] for result in results}
    assert len(holders) == 2  # each node's process holds its own folder
    shared = tmp_path / "shared"
    for result in results:
        assert result["released"]
        assert result["refused"].startswith(f"{shared} is being written by process "), result
        assert f"(it holds {shared / FOLDER_LOCK})" in result["refused"]
        assert any(f"by process {holder} (" in result["refused"] for holder in holders)
    assert list(shared.iterdir()) == []  # the holder's lock removed when it stopped


if __name__ == "__main__":
    mp.spawn(as_node, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)
