"""`ScalarEvents`: the TensorBoard event file one of our callbacks writes its scalars to, made at
the first scalar (no writer thread, no file, before it: a run that logs nothing leaves nothing).
A full disk is one DiskFull naming the file (`EventFile`)."""

import os
from typing import Optional

from elmo_plugin.training.event_file import EventFile


class ScalarEvents:
    """Scalars to an event file in `SERIALIZATION_DIR/log/RUN` (`run`: `train`, `checks`, ...),
    its name ending in `filename_suffix` so that two callbacks writing to one folder keep apart."""

    def __init__(self, serialization_dir: str, run: str, filename_suffix: str = "") -> None:
        self.folder = os.path.join(serialization_dir, "log", run)
        self.filename_suffix = filename_suffix
        self._writer: Optional[EventFile] = None

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        if self._writer is None:
            self._writer = EventFile(self.folder, self.filename_suffix)
        self._writer.add_scalar(tag, value, step)

    def close(self) -> None:
        """Flushes and closes the file; a later scalar opens a new one."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
