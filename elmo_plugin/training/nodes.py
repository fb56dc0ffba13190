"""Which node a distributed process runs on, and which process writes a node's serialization
folder: allennlp starts `len(distributed.cuda_devices)` processes on every node, global rank =
node rank x processes per node + local rank."""

import os

import torch.distributed as dist
from allennlp.common.util import is_distributed


def processes_per_node() -> int:
    """The processes allennlp started on each node (it sets ALLENNLP_PROCS_PER_NODE in each)."""
    return int(os.environ.get("ALLENNLP_PROCS_PER_NODE", "1"))


def node_of(rank: int) -> int:
    """The node rank (`allennlp train --node-rank`) of the process with global rank `rank`."""
    return rank // processes_per_node()


def writes_node_folder() -> bool:
    """Whether this process writes its node's serialization folder (local rank 0: allennlp's
    trainer saves checkpoints there); True outside distributed training."""
    return not is_distributed() or dist.get_rank() % processes_per_node() == 0
