"""The one way this package writes a file, after git's lockfile API and `os.replace`.

- `OutputFile(path)`: a temporary file made by `mkstemp` in the output's folder (a new name no
  one can predict, created exclusively, never through a link), renamed over the output only when
  complete (`commit`: flushed and fsynced first), removed otherwise (`discard`).
- `output_lock(shown, lock_file)`: one writer per output. `OUT.lock` is created with
  `O_CREAT | O_EXCL | O_NOFOLLOW`, holds the writer's process id and an `flock` while it writes.
  A lock left by a killed run (no `flock` held, a process id in it) is taken over; anything else
  at that name (a link, another run's output) is refused, never followed, written or removed.
- `check_output_target(path, shown)`: the output is refused up front when it is a folder, a
  device or pipe, or a file another process holds locked (another run's lock or partial file).
- `user_output(path)`: a symbolic link the user named as the output, resolved once.
- `exclusive_hdf5` / `reopened_hdf5`: a predictable file (`elmo-embed`'s resumable partial)
  created exclusively, or reopened only when it is a plain file of this user, checked to be the
  file HDF5 opened and locked by its writer.
"""

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any, Optional

import h5py
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.full_disk import FULL_DISK, DiskFull

LOCK_SUFFIX = ".lock"
TEMPORARY_SUFFIX = ".partial"
HOLDER_WAIT_S = 0.5  # for the process id of a holder that has just taken the lock
NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class OutputRefused(ConfigurationError):
    """An output that cannot be written safely."""


def user_output(path: str) -> str:
    """The file to write for the output the user named: a symbolic link's target, resolved once
    (the link stays); otherwise `path` as given."""
    return os.path.realpath(path) if os.path.islink(path) else path


def check_output_target(path: str, shown: str) -> None:
    """An OutputRefused naming `shown` when `path` is a folder, a device, a pipe or a socket, or a
    file another process holds locked."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise OutputRefused(f"cannot write {shown}: it is a folder")
    if not stat.S_ISREG(mode):
        raise OutputRefused(
            f"cannot write {shown}: it is a device, pipe or socket, not a regular file; write a "
            "file and copy it"
        )
    holder = lock_holder(path)
    if holder is not None:
        raise OutputRefused(
            f"cannot write {shown}: it is another run's lock or partial file, held by {holder}; "
            "write to another path"
        )


def lock_holder(path: str) -> Optional[str]:
    """'process PID' (or 'another process') holding an `flock` on the regular file `path`; None
    when none does (or `path` is a link or no file)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NO_FOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(descriptor)
        return None
    finally:
        os.close(descriptor)


class OutputFile:
    """A temporary file beside `path` (`mkstemp`: `.NAME.XXXXXXXX.partial`), renamed over `path`
    by `commit` and removed by `discard`; as a context manager, committed when the block ends
    without error. `file` is open for writing ("w": text, UTF-8; "wb"). A full disk is a DiskFull
    naming `shown`, the temporary file removed."""

    def __init__(self, path: str, shown: Optional[str] = None, mode: str = "w") -> None:
        self.path, self.shown = path, shown or path
        check_output_target(path, self.shown)
        folder, name = os.path.split(path)
        try:
            descriptor, self.temporary = tempfile.mkstemp(
                suffix=TEMPORARY_SUFFIX, prefix=f".{name}.", dir=folder or "."
            )
        except OSError as error:
            raise _refusal(error, self.shown) from None
        os.fchmod(descriptor, 0o666 & ~_umask())  # as a plain `open` would make it
        encoding = None if "b" in mode else "utf-8"
        self.file: IO[Any] = os.fdopen(descriptor, mode, encoding=encoding)
        self.identity = os.fstat(descriptor)

    def __enter__(self) -> "OutputFile":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.commit()
            return
        self.discard()
        if isinstance(error, OSError) and error.errno in FULL_DISK:
            raise _refusal(error, self.shown) from None

    def commit(self) -> None:
        """Closed, then renamed over the output (`replace_whole`)."""
        try:
            self.file.close()
            replace_whole(self.temporary, self.identity, self.path, self.shown)
        except OSError as error:
            self.discard()
            raise _refusal(error, self.shown) from None
        except ConfigurationError:
            self.discard()
            raise

    def discard(self) -> None:
        """The temporary file closed and removed (only while it is still this run's file)."""
        self.file.close()
        remove_own(self.temporary, self.identity)


def replace_whole(temporary: str, identity: os.stat_result, path: str, shown: str) -> None:
    """`temporary` (the file `identity` describes, closed by its writers) fsynced and renamed over
    `path`, its folder fsynced; an OutputRefused when `temporary` is no longer that file or `path`
    became another run's locked file."""
    descriptor = os.open(temporary, os.O_RDONLY | NO_FOLLOW)
    try:
        if not os.path.samestat(os.fstat(descriptor), identity):
            raise OutputRefused(
                f"cannot write {shown}: {temporary} was replaced by another process while this "
                "run wrote it"
            )
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    check_output_target(path, shown)
    os.replace(temporary, path)
    _fsync_folder(path)


def remove_own(path: str, identity: os.stat_result) -> None:
    """Removes `path` while it is the file `identity` describes, else leaves it."""
    if _same(path, identity):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def create_exclusively(path: str) -> None:
    """An empty file at `path`, which must not exist (never through a link)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o666))


def open_to_append(path: str) -> IO[str]:
    """`path` opened to append text (created if missing), never through a link."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NO_FOLLOW, 0o666)
    return os.fdopen(descriptor, "a", encoding="utf-8")


@contextlib.contextmanager
def output_lock(shown: str, lock_file: str) -> Iterator[None]:
    """Holds `lock_file` for the output `shown` while the block runs; a ConfigurationError naming
    `shown` and the holder's process id when another process holds it, and an OutputRefused when
    something else is at that name."""
    descriptor = _take_lock(shown, lock_file)
    identity = os.fstat(descriptor)
    try:
        yield
    finally:
        # removed before the lock goes: a process that locks it afterwards finds it removed
        remove_own(lock_file, identity)
        os.close(descriptor)


def _take_lock(shown: str, lock_file: str) -> int:
    while True:
        descriptor: Optional[int]
        try:
            descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o666)
        except FileExistsError:
            descriptor = _existing_lock(shown, lock_file)
        except OSError as error:
            raise _refusal(error, shown) from None
        if descriptor is not None and _locked(descriptor, shown, lock_file):
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"{os.getpid()}\n".encode())
            return descriptor


def _existing_lock(shown: str, lock_file: str) -> Optional[int]:
    """The lock file another run made, opened; an OutputRefused when it is not one (a link,
    several names, another user's or another kind of file); None when it has just gone."""
    try:
        descriptor = os.open(lock_file, os.O_RDWR | NO_FOLLOW)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise _refusal(error, shown) from None
        raise _not_a_lock(shown, lock_file, "a symbolic link") from None
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or found.st_uid != os.geteuid():
        os.close(descriptor)
        raise _not_a_lock(shown, lock_file, "a link, not a plain file of this user")
    return descriptor


def _locked(descriptor: int, shown: str, lock_file: str) -> bool:
    """Takes the `flock` of the lock file open as `descriptor`: True once held on the file still
    at `lock_file`; False (closed) when it has gone meanwhile; a ConfigurationError when another
    process holds it or the file holds something else than a process id."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(descriptor)
        os.close(descriptor)
        raise ConfigurationError(
            f"{shown} is being written by {holder} (it holds {lock_file}); wait for it to end or "
            "write to another path"
        ) from None
    if not _same(lock_file, os.fstat(descriptor)):
        os.close(descriptor)  # removed by a command that just ended: lock the new file
        return False
    held = os.pread(descriptor, 64, 0).decode(errors="replace").strip()
    if held and not held.isdigit():
        os.close(descriptor)
        raise _not_a_lock(shown, lock_file, "another file (not a process id)")
    return True


def _not_a_lock(shown: str, lock_file: str, what: str) -> OutputRefused:
    return OutputRefused(
        f"cannot write {shown}: {lock_file} is {what}, not a lock of this package (another run's "
        "output?); it was left as it is: remove it or write to another path"
    )


def _holder(descriptor: int) -> str:
    """'process PID' from the lock file; a holder that has just locked it is given HOLDER_WAIT_S
    seconds to write it (else 'another process')."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip()
        if holder.isdigit():
            return f"process {holder}"
        if time.monotonic() > deadline:
            return "another process"
        time.sleep(0.01)


def exclusive_hdf5(path: str, shown: str) -> h5py.File:
    """A new HDF5 file at `path`, which must not exist (HDF5's exclusive create: never through a
    link), `flock`ed by this process until closed."""
    try:
        output = h5py.File(path, "x")
    except FileExistsError:
        raise OutputRefused(f"cannot write {shown}: {path} appeared meanwhile") from None
    _lock_hdf5(output, shown)
    return output


def reopened_hdf5(path: str, shown: str) -> h5py.File:
    """The existing HDF5 file `path` opened to append, refused when it is a link, has other
    names, is another user's or is held by another process; `flock`ed until closed."""
    found = plain_own_file(path, shown)
    output = h5py.File(path, "a")
    if not os.path.samestat(os.fstat(output.id.get_vfd_handle()), found):
        output.close()
        raise OutputRefused(f"cannot write {shown}: {path} was replaced while it was opened")
    _lock_hdf5(output, shown)
    return output


def plain_own_file(path: str, shown: str) -> os.stat_result:
    """`path`'s status; an OutputRefused when it is a link, has other names or is another user's:
    no file this package made at a name of its own."""
    found = os.lstat(path)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or found.st_uid != os.geteuid():
        raise OutputRefused(
            f"cannot write {shown}: {path} is a link or another user's file, not this package's "
            "partial file; it was left as it is: remove it or write to another path"
        )
    return found


def _lock_hdf5(output: h5py.File, shown: str) -> None:
    try:
        fcntl.flock(output.id.get_vfd_handle(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        output.close()
        raise OutputRefused(
            f"cannot write {shown}: another process holds {output.filename} locked"
        ) from None


def hdf5_identity(output: h5py.File) -> os.stat_result:
    """What the file HDF5 writes is (for `replace_whole` once it is closed)."""
    return os.fstat(output.id.get_vfd_handle())


def hdf5_file(output: OutputFile) -> h5py.File:
    """A new HDF5 file in `output`'s temporary file, checked to be that file."""
    written = h5py.File(output.temporary, "w")
    if not os.path.samestat(hdf5_identity(written), output.identity):
        written.close()
        raise OutputRefused(
            f"cannot write {output.shown}: {output.temporary} was replaced by another process"
        )
    return written


def _same(path: str, identity: os.stat_result) -> bool:
    try:
        return os.path.samestat(os.lstat(path), identity)
    except FileNotFoundError:
        return False


def _fsync_folder(path: str) -> None:
    descriptor = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _umask() -> int:
    """The process's umask, read without setting it (`os.umask` would change it for every thread
    meanwhile)."""
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))


def _refusal(error: OSError, shown: str) -> ConfigurationError:
    """An OSError while writing `shown`, as one line: a DiskFull for a full disk."""
    if error.errno in FULL_DISK:
        return DiskFull(
            f"cannot write {shown}: the disk is full ({error.strerror}); free some space or "
            "write elsewhere"
        )
    return OutputRefused(f"cannot write {shown}: {error.strerror} ({error.filename})")
