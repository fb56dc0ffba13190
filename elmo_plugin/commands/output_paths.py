"""Output paths checked before any work: a missing or unwritable folder is an error naming the
path. Commands create no folder the user did not name."""

import os
import tempfile

from allennlp.common.checks import ConfigurationError


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
    """`path` can be written: its folder exists and is writable, and it is not a folder."""
    if os.path.isdir(path):
        raise ConfigurationError(f"cannot write {path}: it is a folder")
    _require_writable_folder(os.path.dirname(os.path.abspath(path)), path)


def check_output_dir(path: str) -> None:
    """`path` is a writable folder, or can be created as one in an existing writable folder
    (missing parents are not created)."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigurationError(f"cannot write to {path}: it exists and is not a folder")
        _require_writable_folder(path, path)
    else:
        _require_writable_folder(os.path.dirname(os.path.abspath(path)), path)
