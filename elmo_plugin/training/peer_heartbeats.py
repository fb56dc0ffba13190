"""Heartbeats between distributed processes through a torch.distributed key-value store, and the
verdict when a process goes silent: what the `elmo_peer_watchdog` callback runs beside training.

Every `interval` seconds each process adds 1 to its counter `elmo_peer_watchdog/beat/RANK`.
Rank 0, whose process holds the store, reads every other rank's counter: a rank whose counter
has not moved over reads spanning `timeout` seconds is lost (unless it marked itself finished).
The other ranks watch rank 0 through the store itself: `timeout` seconds without a successful
store operation while one is being tried (a connection stalled by a cut link or refused by a
dead process) means rank 0 is lost. A lost peer makes `stop(line)` run once, with one line naming
it; rank 0 first leaves that line in the store, where every other rank reads it and stops with
it too, and waits (at most 2 intervals) until every rank still beating has counted itself in
`elmo_peer_watchdog/read`: its store goes when it stops. Rank 0 reads world_size - 1 counters per
interval, every other rank two keys."""

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Optional

from torch.distributed import Store

logger = logging.getLogger(__name__)

PREFIX = "elmo_peer_watchdog"
LOST = f"{PREFIX}/lost"
READ = f"{PREFIX}/read"  # how many ranks have read the verdict in LOST


def key(kind: str, rank: int) -> str:
    return f"{PREFIX}/{kind}/{rank}"


class PeerHeartbeats:
    """
    Heartbeats of one process (see the module docstring). `describe(rank)` names a rank in the
    line (e.g. "rank 1 (node 1)"); `stop(line)` ends the process (the callback logs the line and
    exits), called from a background thread; `clock` is injectable for tests.
    """

    def __init__(
        self,
        store: Store,
        rank: int,
        world_size: int,
        timeout: float,
        interval: float,
        stop: Callable[[str], None],
        describe: Callable[[int], str] = lambda rank: f"rank {rank}",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.timeout, self.interval = timeout, interval
        self.stop, self.describe, self.clock = stop, describe, clock
        self.verdict: Optional[str] = None
        self._deciding = threading.Lock()
        self._decided = threading.Event()
        self._closed = threading.Event()
        self._trying_since: Optional[float] = None  # set while store operations fail or hang
        self._counters: dict[int, tuple[int, float]] = {}  # rank -> (value, when it last moved)
        self._hosts: dict[int, str] = {}  # read while the store answers, for the line
        self._threads = [
            threading.Thread(target=self._beat, name="elmo_peer_watchdog beat", daemon=True),
            threading.Thread(target=self._judge, name="elmo_peer_watchdog judge", daemon=True),
        ]

    def start(self) -> None:
        self.store.set(key("host", self.rank), socket.gethostname())
        now = self.clock()
        self._counters = {peer: (0, now) for peer in range(1, self.world_size) if self.rank == 0}
        for thread in self._threads:
            thread.start()

    def finish(self) -> None:
        """Training ended well here: the others stop counting on this process's heartbeat."""
        self.close()
        try:
            self.store.set(key("done", self.rank), "1")
        except Exception:  # rank 0 (the store) already ended after its own training
            logger.debug("elmo_peer_watchdog: rank %d could not mark itself done", self.rank)

    def close(self) -> None:
        self._closed.set()

    def wait_for_verdict(self, seconds: float) -> Optional[str]:
        """The line naming a lost peer once there is one, or None after `seconds`."""
        self._decided.wait(seconds)
        return self.verdict

    # --- the two threads ---

    def _beat(self) -> None:
        while not self._closed.is_set():
            if self._trying_since is None:
                self._trying_since = self.clock()
            try:
                self._beat_once()
            except Exception:  # refused, reset or timed out: the judge decides when it is too long
                self._closed.wait(self.interval)
                continue
            self._closed.wait(self.interval)

    def _beat_once(self) -> None:
        self.store.add(key("beat", self.rank), 1)
        verdict = self.store.get(LOST).decode() if self.store.check([LOST]) else None
        counters = {peer: self.store.add(key("beat", peer), 0) for peer in self._counters}
        if 0 not in self._hosts and self.store.check([key("host", 0)]):
            self._hosts[0] = self.store.get(key("host", 0)).decode()
        self._trying_since = None
        if verdict is not None:
            self.store.add(READ, 1)
            self._lose(f"rank 0 stopped the run: {verdict}")
        self._check_counters(counters)

    def _judge(self) -> None:
        while not self._closed.wait(self.interval):
            since = self._trying_since
            if since is not None and self.clock() - since > self.timeout:
                self._lose(
                    f"lost {self._name(0)}, which holds the process group's store: no answer "
                    f"for {self.clock() - since:.0f} s (timeout_seconds {self.timeout:g}); "
                    f"stopping rank {self.rank}"
                )

    def _check_counters(self, counters: dict[int, int]) -> None:
        now = self.clock()
        for peer, value in counters.items():
            last, moved = self._counters[peer]
            if value != last:
                self._counters[peer] = (value, now)
            elif now - moved > self.timeout and not self.store.check([key("done", peer)]):
                if self.store.check([key("host", peer)]):
                    self._hosts[peer] = self.store.get(key("host", peer)).decode()
                self._lose(
                    f"lost {self._name(peer)}: no heartbeat for {now - moved:.0f} s "
                    f"(timeout_seconds {self.timeout:g}); stopping rank {self.rank}"
                )

    def _name(self, rank: int) -> str:
        host = self._hosts.get(rank)
        return self.describe(rank) + (f" on host {host}" if host else "")

    def _lose(self, line: str) -> None:
        with self._deciding:
            if self.verdict is not None:
                return
            self.verdict = line
        if self.rank == 0:
            self._leave_verdict(line)
        self._decided.set()
        self._closed.set()
        self.stop(line)

    def _leave_verdict(self, line: str) -> None:
        """Rank 0 leaves the line in its store and waits, at most 2 intervals, until every rank
        still beating has read it."""
        try:
            self.store.set(LOST, line)
            now = self.clock()
            beating = sum(now - moved <= self.timeout for _, moved in self._counters.values())
            deadline = now + 2 * self.interval
            while self.store.add(READ, 0) < beating and self.clock() < deadline:
                time.sleep(self.interval / 10)
        except Exception:
            logger.debug("elmo_peer_watchdog: could not leave the verdict in the store")
