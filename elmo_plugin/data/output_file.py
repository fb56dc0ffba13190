"""The one way this package writes a file, after git's lockfile API and `os.replace`.

- `OutputFile(path)`: a temporary file made by `mkstemp` in the output's folder (a new name no
  one can predict, created exclusively, never through a link), renamed over the output only when
  complete (`commit`: flushed and fsynced first), removed otherwise (`discard`).
- `output_lock(shown, lock_file)`: one writer per output. `OUT.lock` is made whole (this
  package's mark and the writer's process id, `flock`ed) and linked into place, which creates it
  and never follows a link; the `flock` is held while the writer writes. A lock left by a run
  that ended (its mark, no `flock` held) is removed under its `flock` and made anew; anything
  else at that name (a link, another run's output) is refused, never followed, written or
  removed.
- `check_output_target(path, shown)`: the output is refused up front when it is a folder, a
  device or pipe, a standard stream, or a file another process holds locked (another run's lock
  or partial file). A symbolic link at the output is replaced by the renamed file, its target
  never written.
- `exclusive_hdf5` / `reopened_hdf5`: a predictable file (`elmo-embed`'s resumable partial)
  created exclusively, or reopened only when it is a plain file of this user, checked to be the
  file HDF5 opened and locked by its writer.

On a file system without `flock` (Lustre mounted without its `flock` option, NFS without its lock
daemon) outputs are still written whole and locked, with one warning per file system: a lock file
found there is refused as held, since no `flock` tells a killed run's from a running one's.
"""

import contextlib
import errno
import fcntl
import glob
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any, Optional

import h5py
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.full_disk import FULL_DISK, disk_full, full_disk_cause

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
TEMPORARY_SUFFIX = ".partial"
LOCK_MARK = "elmo_plugin lock, process "  # then the holder's process id: what a lock file holds
NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP}  # os.link's on such file systems
NO_FLOCK = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}  # flock without it
WARNED_NO_FLOCK: set[int] = set()  # the file systems (st_dev) warned of, once each


class OutputRefused(ConfigurationError):
    """An output that cannot be written safely."""


def check_output_target(path: str, shown: str) -> None:
    """An OutputRefused naming `shown` when `path` (or what its link names) is a folder, a device,
    a pipe or a socket, a file under /proc (`/dev/stdout`, `/dev/fd/N`), this process's standard
    input, output or error, or a file another process holds locked."""
    if os.path.realpath(path).startswith("/proc/"):
        raise _stream_refused(shown)
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as error:  # a folder on the way that is a file, a loop of links, ...
        raise _refusal(error, shown) from None
    mode = found.st_mode
    if stat.S_ISDIR(mode):
        raise OutputRefused(f"cannot write {shown}: it is a folder")
    if not stat.S_ISREG(mode):
        raise OutputRefused(
            f"cannot write {shown}: it is a device, pipe or socket, not a regular file; write a "
            "file and copy it"
        )
    if any(os.path.samestat(found, stream) for stream in _standard_streams()):
        raise _stream_refused(shown)
    holder = lock_holder(path)
    if holder is not None:
        raise OutputRefused(
            f"cannot write {shown}: it is another run's lock or partial file, held by {holder}; "
            "write to another path"
        )


def _standard_streams() -> list[os.stat_result]:
    streams = []
    for descriptor in (0, 1, 2):
        with contextlib.suppress(OSError):
            streams.append(os.fstat(descriptor))
    return streams


def _stream_refused(shown: str) -> OutputRefused:
    return OutputRefused(
        f"cannot write {shown}: it is a process's open file (/proc, /dev/stdout, /dev/fd) or this "
        "command's standard input, output or error, which the finished file would replace; "
        "write a file and copy it"
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
            _flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(descriptor)
        return None
    finally:
        os.close(descriptor)


class OutputFile:
    """A temporary file beside `path` (`mkstemp`: `.NAME.XXXXXXXX.partial`, `flock`ed while it
    is written), renamed over `path` by `commit` and removed by `discard`; as a context manager,
    committed when the block ends without error. `file` is open for writing ("w": text, UTF-8;
    "wb"). A full disk (also one a writer reports wrapped, as torch.save does) is a DiskFull
    naming `shown`, the temporary file removed. The temporary files of `path` that killed runs
    left (held by no process) are removed first."""

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
        _flock(descriptor, fcntl.LOCK_EX)
        _remove_left_temporaries(folder, name)
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
        cause = full_disk_cause(error)
        if cause is not None:
            raise disk_full(cause, self.shown) from None

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


def _remove_left_temporaries(folder: str, name: str) -> None:
    """Removes each temporary file of `name` in `folder` that a killed run left: this user's,
    one name, held by no process (taken under its `flock`, then removed)."""
    pattern = os.path.join(glob.escape(folder or "."), f".{glob.escape(name)}.*{TEMPORARY_SUFFIX}")
    for path in glob.glob(pattern):
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NO_FOLLOW)
        except OSError:
            continue
        try:
            found = os.fstat(descriptor)
            held = _flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            plain = stat.S_ISREG(found.st_mode) and found.st_nlink == 1
            if held and plain and found.st_uid == os.geteuid() and _same(path, found):
                os.remove(path)
        except OSError:  # held by a writer (BlockingIOError), or gone meanwhile
            pass
        finally:
            os.close(descriptor)


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
    # Not an OutputFile: a log that grows line by line while the run writes it
    # (validation_checks.jsonl, rewritten whole through OutputFile on -r), so no rename applies.
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
        descriptor = _new_lock(shown, lock_file)
        if descriptor is not None:
            return descriptor
        _remove_stale_lock(shown, lock_file)


def _new_lock(shown: str, lock_file: str) -> Optional[int]:
    """The lock made whole beside `lock_file` (`LOCK_MARK` and this process's id, `flock`ed),
    then linked at `lock_file` (`os.link` creates, never follows) -> its descriptor; None when
    something is at `lock_file`. So no lock is ever seen without its holder's id."""
    folder, name = os.path.split(lock_file)
    try:
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{name}.", suffix=".new", dir=folder or "."
        )
    except OSError as error:
        raise _refusal(error, shown) from None
    try:
        _write_mark(descriptor)
        try:
            os.link(temporary, lock_file)
        except OSError as error:
            if error.errno not in NO_HARD_LINKS:
                raise
            os.close(descriptor)  # a file system without hard links: created, then marked
            descriptor = -1
            descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o600)
            _write_mark(descriptor)
    except BaseException as error:
        if descriptor >= 0:
            os.close(descriptor)
        if isinstance(error, FileExistsError):
            return None
        if isinstance(error, OSError):
            raise _refusal(error, shown) from None
        raise
    finally:
        os.remove(temporary)
    return descriptor


def _write_mark(descriptor: int) -> None:
    _flock(descriptor, fcntl.LOCK_EX)
    os.write(descriptor, f"{LOCK_MARK}{os.getpid()}\n".encode())


def _remove_stale_lock(shown: str, lock_file: str) -> None:
    """Removes the lock at `lock_file` when a run that ended left it (this package's mark, this
    user's, no `flock` held), under its `flock`; a ConfigurationError naming the holder while one
    holds it; an OutputRefused when it is no lock of this package (it is left as it is)."""
    try:
        descriptor = os.open(lock_file, os.O_RDONLY | os.O_NONBLOCK | NO_FOLLOW)
    except FileNotFoundError:
        return
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise _refusal(error, shown) from None
        raise _not_a_lock(shown, lock_file, "a symbolic link") from None
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise _not_a_lock(shown, lock_file, "not a plain file")
        try:
            held = _flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = None
        if not held:
            unknown = " (its file system has no flock: if it ended, remove the lock)"
            raise ConfigurationError(
                f"{shown} is being written by {_holder(descriptor)} (it holds {lock_file})"
                f"{unknown if held is False else ''}; wait for it to end or write to another path"
            ) from None
        if not _same(lock_file, found):
            return  # removed by the run that just ended
        mark = os.pread(descriptor, 64, 0).decode(errors="replace")
        if found.st_nlink != 1 or found.st_uid != os.geteuid() or not mark.startswith(LOCK_MARK):
            raise _not_a_lock(shown, lock_file, "not a lock of this package")
        os.remove(lock_file)
    finally:
        os.close(descriptor)


def _not_a_lock(shown: str, lock_file: str, what: str) -> OutputRefused:
    return OutputRefused(
        f"cannot write {shown}: {lock_file} is {what} (another run's output?); it was left as it "
        "is: remove it or write to another path"
    )


def _flock(descriptor: int, operation: int) -> bool:
    """`fcntl.flock` -> True; False where the file system has no `flock` (`NO_FLOCK`, one
    warning per file system): the file is then written without it. A BlockingIOError where
    another process holds it (`LOCK_NB`)."""
    try:
        fcntl.flock(descriptor, operation)
    except OSError as error:
        if error.errno not in NO_FLOCK:
            raise
        device = os.fstat(descriptor).st_dev
        if device not in WARNED_NO_FLOCK:
            WARNED_NO_FLOCK.add(device)
            logger.warning(
                "%s: its file system has no flock (%s): outputs there are still written whole "
                "and locked, but a lock that a killed run left is not taken over (remove it)",
                os.readlink(opened(descriptor)),
                error.strerror,
            )
        return False
    return True


def _holder(descriptor: int) -> str:
    """'process PID' from the lock file open as `descriptor` (else 'another process')."""
    held = os.pread(descriptor, 64, 0).decode(errors="replace").strip()
    process = held.removeprefix(LOCK_MARK.strip()).strip()
    return f"process {process}" if process.isdigit() else "another process"


def exclusive_hdf5(path: str, shown: str) -> h5py.File:
    """A new HDF5 file at `path`, which must not exist (HDF5's exclusive create: never through a
    link), `flock`ed by this process until closed."""
    try:
        output = h5py.File(path, "x")
    except FileExistsError:
        raise OutputRefused(f"cannot write {shown}: {path} appeared meanwhile") from None
    _lock_hdf5(output, path, shown)
    return output


def reopened_hdf5(path: str, shown: str) -> h5py.File:
    """The existing HDF5 file `path` opened to append, refused when it is a link, has other
    names, is another user's or is held by another process; `flock`ed until closed. HDF5 opens
    the file this process opened (never following a link), not the name."""
    try:
        descriptor = os.open(path, os.O_RDWR | NO_FOLLOW)
    except OSError:
        plain_own_file(path, shown)  # a link: refused naming it
        raise
    try:
        found = os.fstat(descriptor)
        if not os.path.samestat(found, plain_own_file(path, shown)):
            raise OutputRefused(f"cannot write {shown}: {path} was replaced while it was opened")
        output = h5py.File(opened(descriptor), "a")
    finally:
        os.close(descriptor)
    _lock_hdf5(output, path, shown)
    return output


def opened(descriptor: int) -> str:
    """A name for the file open as `descriptor` itself (Linux's /proc/self/fd): opening it opens
    that file, whatever is at its path now."""
    return f"/proc/self/fd/{descriptor}"


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


def _lock_hdf5(output: h5py.File, path: str, shown: str) -> None:
    try:
        _flock(output.id.get_vfd_handle(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        output.close()
        raise OutputRefused(f"cannot write {shown}: another process holds {path} locked") from None


def hdf5_identity(output: h5py.File) -> os.stat_result:
    """What the file HDF5 writes is (for `replace_whole` once it is closed)."""
    return os.fstat(output.id.get_vfd_handle())


def hdf5_file(output: OutputFile) -> h5py.File:
    """A new HDF5 file in `output`'s temporary file: the file it holds open, not its name (which
    must still be that file: HDF5 also resolves it)."""
    if not _same(output.temporary, output.identity):
        raise _replaced(output)
    try:
        # HDF5's own file lock would conflict with the one OutputFile holds on this file
        return h5py.File(opened(output.file.fileno()), "w", locking=False)
    except OSError as error:
        if _same(output.temporary, output.identity):
            raise
        raise _replaced(output) from error


def _replaced(output: OutputFile) -> OutputRefused:
    return OutputRefused(
        f"cannot write {output.shown}: {output.temporary} was replaced by another process"
    )


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
        return disk_full(error, shown)
    return OutputRefused(f"cannot write {shown}: {error.strerror} ({error.filename})")
