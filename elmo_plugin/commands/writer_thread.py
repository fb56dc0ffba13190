"""`WriterThread`: `elmo-embed`'s writes (HDF5 datasets, `--resume` records, room checks) run in
order on a thread of their own, so that the next batches are computed meanwhile."""

import queue
import threading
from collections.abc import Callable
from typing import Any, Optional

DEFAULT_DEPTH = 4  # calls waiting at most: each holds a batch's vectors on the host


class WriterThread:
    """
    `submit(call, *args)` runs `call(*args)` on one thread, in the order submitted; `submit`
    waits while `depth` calls are already waiting (bounded memory). The first exception a call
    raises stops the thread's work (the calls after it are dropped). It is raised again, the same
    exception, in the submitting thread: by the next `submit`, or on leaving `with`. Leaving
    waits for every call, also on an exception of its own, which it then lets through: the
    records of an interrupted run are as far as they can be.
    """

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        self._calls: queue.Queue[Optional[tuple[Callable[..., Any], tuple]]] = queue.Queue(depth)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="elmo-embed-writer", daemon=True)

    def __enter__(self) -> "WriterThread":
        self._thread.start()
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self._calls.put(None)
        self._thread.join()
        if error is None:
            self._raise_error()

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        self._raise_error()
        self._calls.put((call, args))

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            if self._error is None:
                call, args = item
                try:
                    call(*args)
                except BaseException as error:  # noqa: BLE001 (raised again in the submitter)
                    self._error = error
