"""`EventFile`: tensorboardX's `SummaryWriter` (one event file in a folder) that a full disk stops
with one error.

tensorboardX writes the events in a thread of its own. A write that fails there ends that thread
with a traceback, and the training thread then waits forever on its full queue (or, at exit,
prints more tracebacks). Here the thread writes through `StopsAtFullDisk`, which keeps the first
full-disk error and writes nothing more; the next event added in the training thread raises it,
a DiskFull naming the event file."""

import logging
from typing import Any

from tensorboardX import SummaryWriter

from elmo_plugin.data.full_disk import StopsAtFullDisk

logger = logging.getLogger(__name__)


class EventFile(SummaryWriter):
    """tensorboardX's `SummaryWriter` for one event file in `folder` (its name ending in
    `filename_suffix`), stopped by a full disk: `add_scalar` and `add_histogram` raise a DiskFull
    naming the file once its writer thread met one (the file is then closed and written no more);
    `close` logs one that no event raised as a warning."""

    def __init__(self, folder: str, filename_suffix: str = "") -> None:
        super().__init__(folder, filename_suffix=filename_suffix)
        events = self.file_writer.event_writer._ev_writer  # what the writer thread writes with
        records = events._py_recordio_writer
        self._stop = events._py_recordio_writer = StopsAtFullDisk(records, records.path)
        self._raised = False

    def add_scalar(self, *args: Any, **kwargs: Any) -> None:
        self._raise_full_disk()
        super().add_scalar(*args, **kwargs)

    def add_histogram(self, *args: Any, **kwargs: Any) -> None:
        self._raise_full_disk()
        super().add_histogram(*args, **kwargs)

    def close(self) -> None:
        super().close()
        if self._stop.error is not None and not self._raised:
            logger.warning("%s", self._stop.error)
            self._raised = True

    def _raise_full_disk(self) -> None:
        if self._stop.error is not None:
            self._raised = True
            super().close()
            raise self._stop.error
