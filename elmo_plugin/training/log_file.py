"""`FullDiskLog`: what a log file's handler writes through, stopped by a full disk with one line.

allennlp logs a training run to `out.log` (`out_worker<rank>.log` per process of a distributed
run) in its serialization folder. Once that file cannot be written, Python's logging reports the
failure with a `--- Logging error ---` traceback on stderr for every line that follows, and the
run goes on. Through `FullDiskLog` the first full-disk error is one error line naming the file,
which is then written no more; the console's log goes on."""

import logging
import os
from collections.abc import Callable
from typing import Any, Optional, TextIO

from elmo_plugin.data.full_disk import FULL_DISK, DiskFull, disk_full

logger = logging.getLogger(__name__)


class FullDiskLog:
    """A log file's text stream (`write`, `flush`, `close`) that stops at the first full-disk
    error: logged once as a DiskFull naming the file, and kept as `error`."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.name = stream.name
        self.error: Optional[DiskFull] = None

    def write(self, text: str) -> None:
        if self.error is None:
            self._stop_at_full_disk(self._stream.write, text)

    def flush(self) -> None:
        if self.error is None:
            self._stop_at_full_disk(self._stream.flush)

    def close(self) -> None:
        self._stop_at_full_disk(self._stream.close)

    def _stop_at_full_disk(self, method: Callable[..., Any], *args: Any) -> None:
        try:
            method(*args)
        except OSError as error:
            if error.errno not in FULL_DISK:
                raise
            if self.error is None:
                self.error = disk_full(error, self.name)  # first: this file's lines stop here
                logger.error("%s (the log goes on here, not in the file)", self.error)


def stop_log_files_at_full_disk(serialization_dir: str) -> None:
    """The root logger's log files in `serialization_dir` (allennlp's `out.log` handler, which
    its `tqdm` logger shares) written through `FullDiskLog`."""
    folder = os.path.abspath(serialization_dir)
    for handler in logging.getLogger().handlers:
        if (
            isinstance(handler, logging.FileHandler)
            and os.path.dirname(handler.baseFilename) == folder
        ):
            handler.setStream(FullDiskLog(handler.stream))  # type: ignore[arg-type]
