"""A full disk while a command writes: one error naming the output (and the room needed where it
is known); never a traceback or a crash. A write that fails inside HDF5 cannot be recovered from
(closing the file then crashes the process), so HDF5 writers check for room before they write
(`check_room`); `output_file.OutputFile` turns a failed plain write into a DiskFull."""

import errno
import os
import resource
from collections.abc import Callable
from typing import Any, Optional

from allennlp.common.checks import ConfigurationError

# ENOSPC: no space left; EDQUOT: over quota; EFBIG: past the process's file-size limit
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
HEADROOM = 1 << 20  # bytes kept for HDF5's own records, which it may write at any time


class DiskFull(ConfigurationError):
    """No room left for an output."""


def disk_full(error: OSError, shown: str) -> DiskFull:
    """The full-disk `error` met while writing `shown`, as one line."""
    return DiskFull(
        f"cannot write {shown}: the disk is full ({error.strerror}); free some space or write "
        "elsewhere"
    )


def full_disk_cause(error: Optional[BaseException]) -> Optional[OSError]:
    """The full-disk OSError behind `error`: itself, or one it was raised from or while handling
    (torch.save reports a failed write as a RuntimeError raised while handling it); else None."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in FULL_DISK:
            return error
        error = error.__cause__ or error.__context__
    return None


def room(path: str) -> int:
    """Bytes that can still be written to the file `path` (existing or not): the free space of its
    disk (as an unprivileged user sees it), at most the process's file-size limit less its size."""
    disk = os.statvfs(os.path.dirname(os.path.abspath(path)))
    free = disk.f_bavail * disk.f_frsize
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY:
        return free
    return min(free, limit - (os.path.getsize(path) if os.path.exists(path) else 0))


def check_room(path: str, needed: int, output: str) -> None:
    """Before writing about `needed` more bytes into `path`: a DiskFull naming `output` when there
    is less room than that (and `HEADROOM`)."""
    left = room(path)
    if needed + HEADROOM > left:
        raise DiskFull(
            f"cannot write {output}: the disk is full ({path} needs about "
            f"{(needed + HEADROOM) / 1e6:.1f} MB more, {max(left, 0) / 1e6:.1f} MB left); "
            "free some space or write elsewhere"
        )


class StopsAtFullDisk:
    """A file's writer (`write`, `flush`, `close`: an event file's records, a log file's stream)
    that the first full-disk error stops: kept as `error` (a DiskFull naming `name`), passed to
    `on_full`, and the file written no more (only closed)."""

    def __init__(
        self, file: Any, name: str, on_full: Callable[[DiskFull], object] = lambda error: None
    ) -> None:
        self._file, self.name, self._on_full = file, name, on_full
        self.error: Optional[DiskFull] = None

    def write(self, data: Any) -> None:
        if self.error is None:
            self._stop_at_full_disk(self._file.write, data)

    def flush(self) -> None:
        if self.error is None:
            self._stop_at_full_disk(self._file.flush)

    def close(self) -> None:
        self._stop_at_full_disk(self._file.close)

    def _stop_at_full_disk(self, method: Callable[..., object], *args: Any) -> None:
        try:
            method(*args)
        except OSError as error:
            if error.errno not in FULL_DISK:
                raise
            if self.error is None:
                self.error = disk_full(error, self.name)
                self._on_full(self.error)
