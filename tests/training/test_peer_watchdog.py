"""elmo_peer_watchdog: heartbeats through a key-value store; a peer that goes silent, or a store
that stops answering, is named in one line within timeout + 2 intervals; peers that beat or
finished are never lost. A real in-process store (torch's HashStore) and fake peers, no network."""

import threading
import time
from typing import Optional

import pytest
import torch.distributed as dist
from allennlp.common.checks import ConfigurationError

from elmo_plugin.training.elmo_peer_watchdog import PeerWatchdogCallback
from elmo_plugin.training.peer_heartbeats import LOST, PeerHeartbeats, key

TIMEOUT, INTERVAL = 0.8, 0.1
SLACK = 2.0  # a loaded machine's scheduling


def watchdog(store, rank: int, world_size: int = 2):
    stopped: list[str] = []
    heartbeats = PeerHeartbeats(
        store,
        rank,
        world_size,
        TIMEOUT,
        INTERVAL,
        stop=stopped.append,
        describe=lambda peer: f"rank {peer} (node {peer})",
    )
    return heartbeats, stopped


def fake_peer(
    store, rank: int, seconds: float, finish: bool = False, beats: Optional[list] = None
) -> threading.Thread:
    """A peer that beats every INTERVAL for `seconds`, then stops (marked done with `finish`).
    `beats` gets the clock just before each beat."""

    def beat() -> None:
        store.set(key("host", rank), "peer-host")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if beats is not None:
                beats.append(time.monotonic())
            store.add(key("beat", rank), 1)
            time.sleep(INTERVAL)
        if finish:
            store.set(key("done", rank), "1")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    return thread


def test_rank_0_names_a_peer_silent_for_the_timeout_within_two_intervals_of_it():
    store = dist.HashStore()
    heartbeats, stopped = watchdog(store, 0)
    heartbeats.start()
    beats: list[float] = []
    fake_peer(store, 1, seconds=0.5, beats=beats).join()
    line = heartbeats.wait_for_verdict(TIMEOUT + 2 * INTERVAL + SLACK)
    waited = time.monotonic() - beats[-1]  # since the last beat (the peer then slept INTERVAL)
    assert stopped == [line]
    assert line.startswith("lost rank 1 (node 1) on host peer-host: no heartbeat for ")
    assert line.endswith("(timeout_seconds 0.8); stopping rank 0")
    assert TIMEOUT < waited <= TIMEOUT + 2 * INTERVAL + SLACK
    assert store.get(LOST).decode() == line  # left for the other ranks


def test_peers_that_keep_beating_or_finished_are_never_lost():
    store = dist.HashStore()
    heartbeats, stopped = watchdog(store, 0, world_size=3)
    heartbeats.start()
    fake_peer(store, 1, seconds=0.3, finish=True)  # finished early: done
    fake_peer(store, 2, seconds=3 * TIMEOUT)  # beats all along
    assert heartbeats.wait_for_verdict(3 * TIMEOUT - 0.5) is None
    heartbeats.finish()
    assert stopped == [] and store.get(key("done", 0)) == b"1"


def test_another_rank_stops_with_the_verdict_rank_0_left():
    store = dist.HashStore()
    store.set(LOST, "lost rank 2 (node 2): no heartbeat for 61 s")
    heartbeats, stopped = watchdog(store, 1, world_size=3)
    heartbeats.start()
    assert heartbeats.wait_for_verdict(1 + SLACK) == (
        "rank 0 stopped the run: lost rank 2 (node 2): no heartbeat for 61 s"
    )
    assert stopped == [heartbeats.verdict]


class CutOffStore:
    """A store that answers until `cut`, then hangs (a cut link) or refuses (a dead process)."""

    def __init__(self, hang: bool) -> None:
        self.store, self.hang, self.cut = dist.HashStore(), hang, threading.Event()

    def __getattr__(self, name: str):
        def operation(*args):
            if self.cut.is_set():
                if self.hang:
                    time.sleep(30)
                raise RuntimeError("Connection refused")
            return getattr(self.store, name)(*args)

        return operation


@pytest.mark.parametrize("hang", [True, False], ids=["link-cut", "process-dead"])
def test_a_rank_whose_store_stops_answering_names_rank_0_within_the_timeout(hang):
    store = CutOffStore(hang)
    heartbeats, stopped = watchdog(store, 1)
    heartbeats.start()
    time.sleep(3 * INTERVAL)
    store.cut.set()
    cut = time.monotonic()
    line = heartbeats.wait_for_verdict(TIMEOUT + 2 * INTERVAL + SLACK)
    assert time.monotonic() - cut <= TIMEOUT + 2 * INTERVAL + SLACK
    assert stopped == [line] and line.startswith(
        "lost rank 0 (node 0), which holds the process group's store: no answer for "
    )


def test_rank_0_stops_only_once_the_ranks_still_beating_have_read_its_verdict():
    """Rank 0's process holds the store, which goes when it stops: a third rank must still stop
    with rank 0's line (naming the lost rank 1), not with "lost rank 0"."""
    store = CutOffStore(hang=False)
    first, stopped = watchdog(store, 0, world_size=3)
    first.stop = lambda line: (stopped.append(line), store.cut.set())  # the store goes with it
    third, _ = watchdog(store, 2, world_size=3)
    first.start()
    third.start()
    fake_peer(store.store, 1, seconds=0.5).join()
    line = first.wait_for_verdict(TIMEOUT + 4 * INTERVAL + SLACK)
    assert line is not None and line.startswith("lost rank 1 (node 1)")
    assert third.wait_for_verdict(SLACK) == f"rank 0 stopped the run: {line}"
    assert store.store.add("elmo_peer_watchdog/read", 0) == 1


def test_the_timeout_must_exceed_the_interval():
    with pytest.raises(ConfigurationError, match="0 < interval_seconds < timeout_seconds"):
        PeerWatchdogCallback("unused", timeout_seconds=5, interval_seconds=5)


def test_in_a_single_process_the_watchdog_does_nothing(tmp_path):
    callback = PeerWatchdogCallback(str(tmp_path))
    callback.on_start(trainer=None)
    callback.on_end(trainer=None, metrics={"loss": 1.0})
    assert callback._heartbeats is None and not list(tmp_path.iterdir())
