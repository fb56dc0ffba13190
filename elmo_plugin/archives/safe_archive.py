"""Opening a `model.tar.gz` we did not make: every member is checked before anything is extracted.

allennlp's own `extracted_archive` calls `extractall` without a filter, so a member named
`../../x`, `/etc/x` or a link would be written (or followed) outside the temporary folder. Here
only regular files and folders with relative names inside the archive are accepted; the archive
is then extracted into a fresh temporary folder (with tarfile's `data` filter as a second guard
where Python has it) and allennlp's `load_archive` is given that folder.
"""

import contextlib
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import PurePosixPath

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import CONFIG_NAME

WEIGHTS_NAMES = (
    "weights.th",
    "best.th",
)  # allennlp's archive weights, then a serialization folder's


class UnsafeArchiveError(ConfigurationError):
    """An archive refused before extraction: the message names the archive and the member."""


def member_problem(member: tarfile.TarInfo) -> str:
    """Why this member may not be extracted ("" if it may)."""
    path = PurePosixPath(member.name)
    if path.is_absolute():
        return "an absolute path"
    if ".." in path.parts:
        return "a '..' path component"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname!r})"
    if member.isdev():
        return "a device or fifo"
    if not (member.isfile() or member.isdir()):
        return "neither a regular file nor a folder"
    return ""


def open_archive(archive_path: str) -> tarfile.TarFile:
    try:
        return tarfile.open(archive_path)
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ConfigurationError(
            f"{archive_path}: not a readable model archive ({error})"
        ) from None


def checked_members(archive: tarfile.TarFile, archive_path: str) -> list[tarfile.TarInfo]:
    """The archive's members, each checked; an `UnsafeArchiveError` naming the first bad one, a
    ConfigurationError for an unreadable archive or one without config.json or weights."""
    try:
        members = archive.getmembers()
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ConfigurationError(
            f"{archive_path}: not a readable model archive ({error})"
        ) from None
    for member in members:
        problem = member_problem(member)
        if problem:
            raise UnsafeArchiveError(
                f"{archive_path}: refusing to extract member {member.name!r}: {problem}"
            )
    names = {os.path.normpath(member.name) for member in members if member.isfile()}
    if CONFIG_NAME not in names:
        raise ConfigurationError(
            f"{archive_path}: no {CONFIG_NAME} in the archive (not a model archive)"
        )
    if not names.intersection(WEIGHTS_NAMES):
        raise ConfigurationError(
            f"{archive_path}: no model weights ({' or '.join(WEIGHTS_NAMES)}) in the archive"
        )
    return members


def require_model_folder(folder: str) -> None:
    """A serialization folder must hold config.json and weights: an error naming it otherwise."""
    if not os.path.isfile(os.path.join(folder, CONFIG_NAME)):
        raise ConfigurationError(f"{folder}: no {CONFIG_NAME} (not a model archive folder)")
    if not any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHTS_NAMES):
        raise ConfigurationError(f"{folder}: no model weights ({' or '.join(WEIGHTS_NAMES)})")


@contextlib.contextmanager
def extracted_model_archive(archive_path: str) -> Iterator[str]:
    """A temporary folder holding the checked archive's files (removed afterwards)."""
    with open_archive(archive_path) as archive:
        members = checked_members(archive, archive_path)
        folder = tempfile.mkdtemp(prefix="elmo_plugin_archive_")
        try:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuses what we refused, again
                archive.extractall(folder, members=members, filter="data")
            else:
                archive.extractall(folder, members=members)
        except (tarfile.TarError, EOFError) as error:
            shutil.rmtree(folder, ignore_errors=True)
            raise ConfigurationError(f"{archive_path}: cannot extract ({error})") from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
