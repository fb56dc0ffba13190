"""Opening a `model.tar.gz` we did not make: every member is checked before anything is extracted.

allennlp's own `extracted_archive` calls `extractall` without a filter, so a member named
`../../x`, `/etc/x` or a link would be written (or followed) outside the temporary folder. Here
only regular files and folders with relative names inside the archive are accepted; the archive
is then extracted into a fresh temporary folder (with tarfile's `data` filter as a second guard
where Python has it) and allennlp's `load_archive` is given that folder. Importing elmo_plugin
makes allennlp's own `load_archive` extract archives here too (`commands/archive_extraction.py`).

tarfile stops listing members, silently, at a damaged header: the rest of the archive is read
before anything is extracted, so that the checksums of gzip, bz2 and xz catch the damage.
"""

import contextlib
import gzip
import lzma
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Literal

from allennlp.common.checks import ConfigurationError
from allennlp.models.archival import CONFIG_NAME

WEIGHTS_NAMES = (
    "weights.th",
    "best.th",
)  # allennlp's archive weights, then a serialization folder's
VOCABULARY_NAME = "vocabulary"  # the folder allennlp's load_archive reads the vocabulary from
# What reading a damaged or truncated archive raises (gzip's CRC check: BadGzipFile, an OSError)
READ_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError)


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
        return tarfile.open(archive_path, read_mode(archive_path))
    except READ_ERRORS as error:
        raise ConfigurationError(
            f"{archive_path}: not a readable model archive ({error})"
        ) from None


def read_mode(archive_path: str) -> Literal["r:", "r:gz", "r:bz2", "r:xz"]:
    """tarfile's mode for the compression the file's first bytes announce, so that an error is
    that compression's (tarfile's "r:*" tries each, and its error lists every one, a line each)."""
    with open(archive_path, "rb") as source:
        head = source.read(6)
    if head.startswith(b"\x1f\x8b"):
        return "r:gz"
    if head.startswith(b"BZh"):
        return "r:bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "r:xz"
    return "r:"


def checked_members(archive: tarfile.TarFile, archive_path: str) -> list[tarfile.TarInfo]:
    """The archive's members, each checked; an `UnsafeArchiveError` naming the first bad one, a
    ConfigurationError for a damaged archive or one without config.json, weights or vocabulary."""
    members = whole_listing(archive, archive_path)
    for member in members:
        problem = member_problem(member)
        if problem:
            raise UnsafeArchiveError(
                f"{archive_path}: refusing to extract member {member.name!r}: {problem}"
            )
    require_model_members(members, archive_path)
    return members


def whole_listing(archive: tarfile.TarFile, archive_path: str) -> list[tarfile.TarInfo]:
    """The archive's members, what follows them read too: only NUL blocks in a whole archive
    (tarfile stops listing, silently, at a header it cannot read), then a compressed archive's
    checksum; otherwise an error naming the archive and the last member listed (the damage is in
    its data or after it, where a stream checksum tells)."""
    stream = archive.fileobj
    assert stream is not None  # an archive opened for reading
    members: list[tarfile.TarInfo] = []
    try:
        for member in archive:  # one by one: those before the damage are known
            members.append(member)
        while chunk := stream.read(1 << 20):
            if chunk.strip(b"\0"):
                raise tarfile.ReadError("a damaged member header")
    except READ_ERRORS as error:
        where = f"from member {members[-1].name!r} on" if members else "at its start"
        raise ConfigurationError(
            f"{archive_path}: damaged model archive, unreadable {where} ({error})"
        ) from None
    return members


def require_model_members(members: list[tarfile.TarInfo], archive_path: str) -> None:
    """An error naming the archive when config.json, weights or vocabulary/ is missing."""
    names = {os.path.normpath(member.name) for member in members if member.isfile()}
    if CONFIG_NAME not in names:
        raise ConfigurationError(
            f"{archive_path}: no {CONFIG_NAME} in the archive (not a model archive)"
        )
    if not names.intersection(WEIGHTS_NAMES):
        raise ConfigurationError(
            f"{archive_path}: no model weights ({' or '.join(WEIGHTS_NAMES)}) in the archive"
        )
    if not any(name.startswith(VOCABULARY_NAME + "/") for name in names):
        raise ConfigurationError(
            f"{archive_path}: no {VOCABULARY_NAME}/ folder in the archive (not a model archive)"
        )


def require_model_folder(folder: str) -> None:
    """A serialization folder must hold config.json and weights: an error naming it otherwise."""
    if not os.path.isfile(os.path.join(folder, CONFIG_NAME)):
        raise ConfigurationError(f"{folder}: no {CONFIG_NAME} (not a model archive folder)")
    if not any(os.path.isfile(os.path.join(folder, name)) for name in WEIGHTS_NAMES):
        raise ConfigurationError(f"{folder}: no model weights ({' or '.join(WEIGHTS_NAMES)})")


@contextlib.contextmanager
def extracted_model_archive(archive_path: str, cleanup: bool = True) -> Iterator[str]:
    """A temporary folder holding the checked archive's files, removed afterwards. With `cleanup`
    False the caller removes it (allennlp's `load_archive` does). Removed always when extraction
    fails (an error naming the archive) or is interrupted. The signature is allennlp's
    `extracted_archive`'s, which `commands/archive_extraction.py` replaces with this."""
    folder = extracted_folder(archive_path)
    try:
        yield folder
    finally:
        if cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def extracted_folder(archive_path: str) -> str:
    """A new temporary folder (`elmo_plugin_archive_*`) holding the checked archive's files;
    removed when extraction fails."""
    with open_archive(archive_path) as archive:
        members = checked_members(archive, archive_path)
        folder = tempfile.mkdtemp(prefix="elmo_plugin_archive_")
        try:
            extract(archive, archive_path, members, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    return folder


def extract(
    archive: tarfile.TarFile, archive_path: str, members: list[tarfile.TarInfo], folder: str
) -> None:
    """Extracts the checked `members` into `folder`; an error naming the archive if it cannot."""
    try:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: refuses what we refused, again
            archive.extractall(folder, members=members, filter="data")
        else:
            archive.extractall(folder, members=members)
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as error:
        raise ConfigurationError(
            f"{archive_path}: damaged model archive, cannot extract ({error})"
        ) from None
    except OSError as error:  # no room, no permission: the message names the temporary folder
        raise ConfigurationError(
            f"{archive_path}: cannot extract into a temporary folder in {tempfile.gettempdir()} "
            f"({error.strerror or error})"
        ) from None
