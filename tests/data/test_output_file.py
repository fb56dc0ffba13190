"""data/output_file.py, the one way the package writes a file: what an output may be, the lock
(made whole, taken over only from a run of this package that ended), HDF5 written into the file
the primitive holds open, never through a name."""

import errno
import fcntl
import os
from pathlib import Path

import h5py
import pytest
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data import output_file
from elmo_plugin.data.output_file import (
    LOCK_MARK,
    OutputFile,
    OutputRefused,
    check_output_target,
    hdf5_file,
    output_lock,
)


@pytest.mark.parametrize("path", ["/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/2"])
def test_a_standard_stream_or_proc_file_is_refused_as_an_output(path):
    """(a terminal's is refused as a device)"""
    with pytest.raises(OutputRefused, match="standard input, output or error|a device"):
        check_output_target(path, path)


def test_an_output_that_is_this_commands_redirected_output_is_refused(tmp_path):
    """`elmo-vocab in.txt log.txt >> log.txt`: the rename would replace what was logged."""
    log = tmp_path / "log.txt"
    log.write_text("earlier lines\n")
    with open(log, "a") as stream:
        saved = os.dup(1)
        os.dup2(stream.fileno(), 1)
        try:
            with pytest.raises(OutputRefused, match="standard input, output or error"):
                check_output_target(str(log), "log.txt")
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    assert log.read_text() == "earlier lines\n"


@pytest.mark.parametrize("inside", ["file.txt/out.txt", "loop/out.txt", "loop"])
def test_an_output_path_that_cannot_be_reached_is_one_refusal(tmp_path, inside):
    (tmp_path / "file.txt").write_text("x")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(OutputRefused, match=f"cannot write {inside}: "):
        check_output_target(str(tmp_path / inside), inside)


def test_a_link_at_the_output_is_replaced_and_its_target_never_written(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("the link's target\n")
    os.symlink(target, tmp_path / "out.txt")
    with OutputFile(str(tmp_path / "out.txt")) as out:
        out.file.write("written\n")
    assert target.read_text() == "the link's target\n"
    assert not os.path.islink(tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == "written\n"


@pytest.mark.parametrize("content", [b"", b"12345\n", b"a finished run's output\n"])
def test_a_file_at_the_lock_name_that_no_run_of_this_package_left_is_kept(tmp_path, content):
    """Another run's output named OUT.lock (empty, or digits like a pid file) is no lock."""
    lock = tmp_path / "out.hdf5.lock"
    lock.write_bytes(content)
    with pytest.raises(OutputRefused, match="not a lock of this package"):
        with output_lock("out.hdf5", str(lock)):
            pass
    assert lock.read_bytes() == content


def test_a_lock_a_run_left_is_taken_over_and_removed_at_the_end(tmp_path):
    lock = tmp_path / "out.hdf5.lock"
    lock.write_text(f"{LOCK_MARK}999999\n")  # a killed run's: its mark, no flock held
    with output_lock("out.hdf5", str(lock)):
        assert lock.read_text() == f"{LOCK_MARK}{os.getpid()}\n"
    assert sorted(os.listdir(tmp_path)) == []


def test_a_lock_is_never_seen_without_its_holders_id(tmp_path, monkeypatch):
    """It is written, `flock`ed, beside the lock's name, then linked there whole."""
    seen = []
    link = os.link

    def linking(source, target):
        with open(source) as made:
            seen.append(made.read())
            try:
                fcntl.flock(made, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("not held")
            except BlockingIOError:
                seen.append("held")
        link(source, target)

    monkeypatch.setattr(output_file.os, "link", linking)
    lock = tmp_path / "out.hdf5.lock"
    with output_lock("out.hdf5", str(lock)):
        with pytest.raises(ConfigurationError, match=f"by process {os.getpid()} "):
            with output_lock("out.hdf5", str(lock)):
                pass
    assert seen == [f"{LOCK_MARK}{os.getpid()}\n", "held"] * 2  # the second run's, refused


def test_hdf5_goes_into_the_file_the_primitive_holds_not_through_its_name(tmp_path):
    """A link swapped in for the temporary file meanwhile: its target is never written, and
    the output is refused."""
    victim = tmp_path / "victim.txt"
    victim.write_text("outside\n")
    output = OutputFile(str(tmp_path / "out.hdf5"), mode="wb")
    os.remove(output.temporary)
    os.symlink(victim, output.temporary)
    with pytest.raises(OutputRefused, match="was replaced by another process"):
        hdf5_file(output)
    output.discard()
    assert victim.read_text() == "outside\n" and not (tmp_path / "out.hdf5").exists()


def test_hdf5_written_whole_through_the_primitive_reads_back(tmp_path):
    with OutputFile(str(tmp_path / "out.hdf5"), mode="wb") as output:
        with hdf5_file(output) as written:
            written.create_dataset("weights", data=[1.0, 2.0])
    with h5py.File(tmp_path / "out.hdf5", "r") as read:
        assert read["weights"][()].tolist() == [1.0, 2.0]
    assert sorted(os.listdir(tmp_path)) == ["out.hdf5"]


def test_a_resumed_partial_is_opened_as_the_file_checked_not_through_a_link(tmp_path: Path):
    partial = tmp_path / "out.hdf5.partial"
    with h5py.File(partial, "w") as made:
        made.attrs["lines_done"] = 3
    os.symlink(partial, tmp_path / "linked.partial")
    with pytest.raises(OutputRefused, match="is a link"):
        output_file.reopened_hdf5(str(tmp_path / "linked.partial"), "out.hdf5")
    with output_file.reopened_hdf5(str(partial), "out.hdf5") as reopened:
        assert reopened.attrs["lines_done"] == 3


def test_a_temporary_file_a_killed_run_left_is_removed_and_a_writers_is_not(tmp_path):
    left = tmp_path / ".out.txt.k1ll3d00.partial"  # no process holds it
    left.write_text("half of an output")
    other = tmp_path / ".other.txt.k1ll3d00.partial"  # another output's
    other.write_text("half of another output")
    writing = OutputFile(str(tmp_path / "out.txt"))  # a live writer of the same output
    with OutputFile(str(tmp_path / "out.txt")) as out:
        out.file.write("whole\n")
    assert not left.exists() and other.exists() and os.path.exists(writing.temporary)
    writing.discard()
    assert sorted(os.listdir(tmp_path)) == [".other.txt.k1ll3d00.partial", "out.txt"]


@pytest.fixture
def no_flock(monkeypatch):
    """A file system without `flock` (Lustre without its `flock` option): every call ENOLCK."""

    def refused(descriptor, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output_file.fcntl, "flock", refused)
    monkeypatch.setattr(output_file, "WARNED_NO_FLOCK", set())


def test_without_flock_outputs_are_written_whole_and_locked_with_one_warning(
    tmp_path, no_flock, caplog
):
    for _ in range(2):
        with output_lock("out.txt", str(tmp_path / "out.txt.lock")):
            with OutputFile(str(tmp_path / "out.txt")) as out:
                out.file.write("written\n")
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]
    assert (tmp_path / "out.txt").read_text() == "written\n"
    (warning,) = [r.getMessage() for r in caplog.records if "flock" in r.getMessage()]
    assert "has no flock (No locks available)" in warning and "remove it" in warning


def test_without_flock_a_lock_found_is_refused_as_held_and_kept(tmp_path, no_flock):
    """No `flock` tells a killed run's lock from a running one's: it is left to the user."""
    lock = tmp_path / "out.txt.lock"
    lock.write_text(f"{LOCK_MARK}999999\n")
    with pytest.raises(ConfigurationError, match=r"process 999999 .*has no flock: if it ended"):
        with output_lock("out.txt", str(lock)):
            pass
    assert lock.read_text() == f"{LOCK_MARK}999999\n"


def test_without_flock_a_temporary_file_found_is_kept(tmp_path, no_flock):
    """It may be another run's, being written."""
    other = tmp_path / ".out.txt.abcd1234.partial"
    other.write_text("another run's\n")
    with OutputFile(str(tmp_path / "out.txt")) as out:
        out.file.write("written\n")
    assert other.read_text() == "another run's\n"
