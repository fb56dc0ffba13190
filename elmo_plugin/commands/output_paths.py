"""Output paths checked before any work: a missing or unwritable folder, or an output that is an
input, is an error naming the path. Commands create no folder the user did not name."""

import os
import tempfile
from collections.abc import Iterable

from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.output_file import (
    LOCK_SUFFIX,
    TEMPORARY_SUFFIX,
    check_output_target,
)


def _require_writable_folder(folder: str, output: str) -> None:
    if not os.path.isdir(folder):
        raise ConfigurationError(f"cannot write {output}: folder {folder} does not exist")
    try:  # os.access says yes to root even on a read-only mount: try it
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".elmo_plugin_probe_"):
            pass
    except OSError as error:
        raise ConfigurationError(
            f"cannot write {output}: folder {folder} is not writable ({error.strerror})"
        ) from None


def check_output_file(path: str) -> None:
    """`path` can be written: its folder exists and is writable, and it (or the file its link
    names) is no folder, device or locked file (`check_output_target`)."""
    if path.endswith(os.sep):
        raise ConfigurationError(f"cannot write {path}: it names a folder; name a file")
    check_output_target(path, path)
    _require_writable_folder(os.path.dirname(os.path.abspath(path)), path)


def check_output_dir(path: str) -> None:
    """`path` is a writable folder, or can be created as one in an existing writable folder
    (missing parents are not created); not a link to nothing."""
    if os.path.islink(path) and not os.path.exists(path):
        raise ConfigurationError(
            f"cannot write to {path}: it is a link to {os.readlink(path)}, which does not exist"
        )
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigurationError(f"cannot write to {path}: it exists and is not a folder")
        _require_writable_folder(path, path)
    else:
        _require_writable_folder(os.path.dirname(os.path.abspath(path)), path)


def check_not_an_input(outputs: Iterable[str], inputs: dict[str, str]) -> None:
    """Before any work: an error naming both when an output path (or its `.partial`, `.lock`)
    is one of the `inputs` ({path: what it is, e.g. "input file"}) - the same file by device and
    inode, so through a link too - or lies inside an input folder (a model folder)."""
    for source, role in inputs.items():
        if not os.path.exists(source):
            continue
        for output in outputs:
            if os.path.isdir(source):
                folder = os.path.realpath(source)
                inside = os.path.realpath(output) + os.sep
                if inside.startswith(folder + os.sep):
                    raise ConfigurationError(
                        f"cannot write {output}: it is inside the {role} {source}, which it could "
                        "destroy; write it elsewhere"
                    )
            elif any(
                os.path.exists(path) and os.path.samefile(path, source)
                for path in (output, output + TEMPORARY_SUFFIX, output + LOCK_SUFFIX)
            ):
                raise ConfigurationError(
                    f"cannot write {output}: it is the {role} {source}, which writing it would "
                    "destroy; choose another output path"
                )
