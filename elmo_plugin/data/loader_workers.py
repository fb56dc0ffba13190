"""Data-loader worker processes (the `elmo_corpus` loader's `num_workers`): each builds every
N-th unit of work (a chunk's batches) and the main process takes the results in unit order, so
the batches are the same whatever the number of workers. A worker's error is raised again in
the main process; a worker whose main process died exits. A worker that has not started within
`START_S` (a fork from a process with other threads running can hang in the child before any
of its own code runs) is killed and forked again, with a warning: `START_ATTEMPTS` forks in
all, then an error."""

import logging
import os
import queue as queue_errors
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.multiprocessing as mp

QUEUE_ITEMS = 64  # items a worker may hold ready (about a chunk's batches)
END_OF_UNIT = "end of unit"
START_S = 60.0  # for a forked worker to run its first line
START_ATTEMPTS = 3

logger = logging.getLogger(__name__)


class WorkerFailure(RuntimeError):
    """An error raised in a loader worker, re-raised in the main process."""


def worker_results(
    build: Callable[[int], Iterable[Any]],
    units: list[int],
    num_workers: int,
    name: str,
    start_s: float = START_S,
) -> Iterator[tuple[int, Any]]:
    """(unit, item) for every item of `build(unit)`, for each unit of `units` in turn, built by
    `num_workers` forked processes: worker w builds units[w], units[w + N], ... . `name` (the
    loader's) prefixes errors. Items cross processes through torch's queues (tensors by shared
    memory). `start_s`: seconds for a worker to start before it is forked again."""
    context = mp.get_context("fork")
    consumed = context.Event()
    queues, workers = [], []
    try:
        for w in range(num_workers):
            who = f"{name} worker {w}"
            queue, worker = _started(context, build, units[w::num_workers], consumed, who, start_s)
            queues.append(queue)
            workers.append(worker)
        for i, unit in enumerate(units):
            w = i % num_workers
            while (item := _get(queues[w], workers[w], name)) != END_OF_UNIT:
                yield unit, item
    finally:
        consumed.set()
        for worker in workers:
            worker.join(timeout=5.0)
            if worker.is_alive():
                worker.terminate()
                worker.join()


def _started(context, build, units: list[int], consumed, who: str, start_s: float) -> tuple:
    """A worker forked and running its own code (each attempt with a new queue: a killed one
    may hold the old one's lock) -> (its queue, the process)."""
    for attempt in range(1, START_ATTEMPTS + 1):
        queue, started = context.Queue(maxsize=QUEUE_ITEMS), context.Event()
        worker = context.Process(
            target=_work,
            args=(build, units, queue, consumed, started, os.getpid(), who),
            daemon=True,
        )
        worker.start()
        if started.wait(timeout=start_s):
            return queue, worker
        worker.kill()
        worker.join()
        logger.warning(
            "%s: not started %g s after its fork (attempt %d of %d)",
            who,
            start_s,
            attempt,
            START_ATTEMPTS,
        )
    raise WorkerFailure(f"{who}: not started within {start_s:g} s, {START_ATTEMPTS} times")


def _work(
    build: Callable[[int], Iterable[Any]],
    units: list[int],
    queue,
    consumed,
    started,
    parent: int,
    who: str,
) -> None:
    started.set()
    # One torch thread, as torch's own DataLoader workers: the fork copied none of the main
    # process's threads, and GNU OpenMP cannot start a parallel region in a child forked after
    # the parent ran one.
    torch.set_num_threads(1)
    try:
        for unit in units:
            for item in build(unit):
                _put(queue, item, parent)
            _put(queue, END_OF_UNIT, parent)
    except Exception as error:  # the main process raises it
        _put(queue, WorkerFailure(f"{who}: {error!r}"), parent)
    # The main process receives a batch's tensors from this process (torch shares them by
    # file descriptor), so it stays until all were taken.
    while not consumed.wait(timeout=1.0) and os.getppid() == parent:
        pass


def _put(queue, item, parent: int) -> None:
    """Puts `item`, waiting while the queue is full; exits when the main process died."""
    while True:
        try:
            queue.put(item, timeout=1.0)
            return
        except queue_errors.Full:
            if os.getppid() != parent:
                os._exit(0)


def _get(queue, worker, name: str) -> Any:
    """The next item from a worker's queue; its error re-raised, or an error if it died."""
    while True:
        try:
            item = queue.get(timeout=1.0)
        except queue_errors.Empty:
            if worker.is_alive():
                continue
            try:
                item = queue.get(timeout=1.0)
            except queue_errors.Empty:
                raise WorkerFailure(
                    f"{name}: a worker exited with code {worker.exitcode}"
                ) from None
        if isinstance(item, WorkerFailure):
            raise item
        return item
