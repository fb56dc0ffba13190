"""Trainer callback `elmo_peer_watchdog`: under distributed training, a process whose peer is lost
(killed, or cut off by the network) stops within a bounded time with one line naming the peer,
instead of waiting in a collective for torch's 30-minute default (allennlp passes no timeout to
`init_process_group`)."""

import logging
import os
import sys
from datetime import timedelta
from typing import Any, Optional

import torch.distributed as dist
from allennlp.common.checks import ConfigurationError
from allennlp.training.callbacks.callback import TrainerCallback
from torch.distributed import distributed_c10d

from elmo_plugin.training.nodes import node_of
from elmo_plugin.training.peer_heartbeats import PeerHeartbeats

logger = logging.getLogger(__name__)

EXIT_STATUS = 1


@TrainerCallback.register("elmo_peer_watchdog")
class PeerWatchdogCallback(TrainerCallback):
    """
    Every process sends a heartbeat through the process group's key-value store (held by rank 0's
    process) every `interval_seconds`. Rank 0 stops when another rank has sent none for
    `timeout_seconds`; every other rank stops when rank 0's store has not answered for
    `timeout_seconds` or when rank 0 stopped the run. Stopping is one error line, e.g.
    `elmo_peer_watchdog: lost rank 1 (node 1) on host gpu-07: no heartbeat for 62 s
    (timeout_seconds 60); stopping rank 0`, then exit status 1 (allennlp's `train` then ends
    that node's other processes). So a node stops at most `timeout_seconds` + 2 x
    `interval_seconds` after a peer is killed or its link is cut. A process whose training failed
    on its own (a peer's closed connection, say) first waits as long for the verdict, so that the
    line names the peer. The heartbeats run in a thread of their own, beside training: set
    `timeout_seconds` above the longest time a process may hold Python's GIL (a checkpoint save
    takes seconds). Does nothing in a single process; `allennlp train -r` resumes a stopped run
    ([docs/scaling.md](docs/scaling.md)).

    # Parameters

    serialization_dir : `str`
        Given by allennlp: the run's folder.
    timeout_seconds : `float`, optional (default = `60.0`)
        How long a peer may stay silent before it counts as lost.
    interval_seconds : `float`, optional (default = `5.0`)
        Seconds between two heartbeats (and two checks).
    """

    def __init__(
        self, serialization_dir: str, timeout_seconds: float = 60.0, interval_seconds: float = 5.0
    ) -> None:
        super().__init__(serialization_dir)
        if not 0 < interval_seconds < timeout_seconds:
            raise ConfigurationError(
                "callback elmo_peer_watchdog: need 0 < interval_seconds < timeout_seconds, got "
                f"interval_seconds {interval_seconds} and timeout_seconds {timeout_seconds}"
            )
        self.timeout_seconds = timeout_seconds
        self.interval_seconds = interval_seconds
        self._heartbeats: Optional[PeerHeartbeats] = None

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        # A connection of its own to the store, whose operations give up after an interval.
        store = distributed_c10d._get_default_store().clone()
        store.set_timeout(timedelta(seconds=self.interval_seconds))
        self._heartbeats = PeerHeartbeats(
            store,
            dist.get_rank(),
            dist.get_world_size(),
            self.timeout_seconds,
            self.interval_seconds,
            stop=stop_process,
            describe=lambda rank: f"rank {rank} (node {node_of(rank)})",
        )
        self._heartbeats.start()

    def on_end(
        self,
        trainer,
        metrics: Optional[dict[str, Any]] = None,
        epoch: Optional[int] = None,
        is_primary: bool = True,
        **kwargs,
    ) -> None:
        if self._heartbeats is None:
            return
        if metrics is None:  # allennlp passes no metrics when training raised
            self._heartbeats.wait_for_verdict(self.timeout_seconds + 2 * self.interval_seconds)
            self._heartbeats.close()
        else:
            self._heartbeats.finish()
        self._heartbeats = None


def stop_process(line: str) -> None:
    """Logs `line` as this process's last word and exits at once: the training thread may be
    blocked in a collective that would wait for the lost peer for 30 minutes."""
    logger.error("elmo_peer_watchdog: %s", line)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_STATUS)
