"""One writer per output: while a command writes an output it holds an exclusive `fcntl.flock` on a
lock file beside it (`OUT.lock`; `OUT_DIR/.elmo_export.lock` for a folder) holding its process
id. A second command for the same output is refused before it touches anything, naming the output
and the process that writes it. The lock file is removed when the command ends; one left by a
killed command holds no lock (the kernel drops it with the process) and is taken over."""

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from allennlp.common.checks import ConfigurationError

LOCK_SUFFIX = ".lock"
HOLDER_WAIT_S = 0.5  # for the process id of a holder that has just taken the lock


@contextlib.contextmanager
def output_lock(output: str, lock_file: str) -> Iterator[None]:
    """Holds the lock on `lock_file` for `output` while the block runs; a ConfigurationError
    naming `output` and the holder's process id when another process holds it."""
    descriptor = _locked(output, lock_file)
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield
    finally:
        # removed before the lock goes: a process that locks it afterwards finds it removed
        # and locks a new file
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock_file)
        os.close(descriptor)


def _locked(output: str, lock_file: str) -> int:
    while True:
        descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(descriptor)
            os.close(descriptor)
            process = f"process {holder}" if holder.isdigit() else "another process"
            raise ConfigurationError(
                f"{output} is being written by {process} (it holds {lock_file}); wait for it to "
                "end or write to another path"
            ) from None
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.stat(lock_file), os.fstat(descriptor)):
                return descriptor
        os.close(descriptor)  # removed by a command that just ended: lock the new file


def _holder(descriptor: int) -> str:
    """The process id the holder wrote into the lock file; a holder that has just locked it is
    given HOLDER_WAIT_S seconds to write it (else what is there)."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
        if holder.isdigit() or time.monotonic() > deadline:
            return holder
        time.sleep(0.01)
