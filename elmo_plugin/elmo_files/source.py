"""Where a biLM comes from, decided once (`resolve_bilm_source`) for everything that loads one.

What a user gives is one of three kinds:
- MODEL_ARCHIVE: a model archive (our `elmo_bilm` or allennlp-models' bidirectional
  `language_model`): a `model.tar.gz`, a URL, or a serialization folder (`config.json`);
- ELMO_FILES: a folder with exactly one `*options.json` and one `*weights.hdf5` under any names
  (as the published downloads are named), optionally one `*softmax.hdf5` and one `*vocab.txt`;
  or the pair `[options, weights]`;
- MANYLANGS: an ELMoForManyLangs model folder.

Paths and URLs both work: each goes through allennlp's `cached_path` once (`local_path`).
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Union

from allennlp.common.checks import ConfigurationError
from allennlp.common.file_utils import cached_path
from allennlp.models.archival import CONFIG_NAME

from elmo_plugin.data.elmo_manylangs_files import FOLDER_FILES as MANYLANGS_FILES
from elmo_plugin.data.elmo_manylangs_files import is_manylangs_folder
from elmo_plugin.elmo_files.layout import (
    OPTIONS_FILE,
    SOFTMAX_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
    ElmoFilesError,
)

MODEL_ARCHIVE = f"a model archive folder ({CONFIG_NAME})"
ELMO_FILES = f"an ELMo files folder (*{OPTIONS_FILE} + *{WEIGHTS_FILE})"
MANYLANGS = f"an ELMoForManyLangs model folder ({', '.join(MANYLANGS_FILES)})"
SHOWN_FILES = 10  # file names an error lists at most

# What a user gives: a path or URL, or the ELMo files as [options, weights].
SourceSpec = Union[str, Sequence[str]]


@dataclass(frozen=True)
class ElmoSource:
    """Local paths of one ELMo's files; `softmax_file` and `vocab_file` are None when absent.
    `name` is the source as given (the folder, or "options + weights"), for messages."""

    name: str
    options_file: str
    weights_file: str
    softmax_file: Optional[str] = None
    vocab_file: Optional[str] = None


@dataclass(frozen=True)
class BilmSource:
    """A resolved biLM source: `kind` (MODEL_ARCHIVE, ELMO_FILES or MANYLANGS), `name` as the
    user gave it (for messages), `path` its local archive file or folder, and for ELMO_FILES
    its `files`."""

    kind: str
    name: str
    path: str
    files: Optional[ElmoSource] = None


def local_path(path_or_url: str, what: str) -> str:
    """A local path as it is, a URL downloaded to allennlp's cache; else an error naming it."""
    if os.path.exists(path_or_url):
        return path_or_url
    try:
        return str(cached_path(path_or_url))
    except (OSError, ValueError) as error:
        detail = "" if path_or_url in str(error) else f" ({error})"  # only where it adds
        raise ConfigurationError(f"{what} not found: {path_or_url}{detail}") from None


def visible_files(folder: str) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def folder_marks(folder: str) -> dict[str, list[str]]:
    """Each kind of biLM folder -> the files in `folder` that mark it (empty lists left out)."""
    names = visible_files(folder)
    elmo = [name for name in names if name.endswith((OPTIONS_FILE, WEIGHTS_FILE))]
    marks = {ELMO_FILES: elmo}
    if is_manylangs_folder(folder):  # its config.json is not an archive's
        marks[MANYLANGS] = [name for name in MANYLANGS_FILES if name in names]
    elif CONFIG_NAME in names:
        marks[MODEL_ARCHIVE] = [CONFIG_NAME]
    return {kind: found for kind, found in marks.items() if found}


def shown(names: list[str]) -> str:
    if not names:
        return "nothing"
    more = f" and {len(names) - SHOWN_FILES} more" if len(names) > SHOWN_FILES else ""
    return ", ".join(names[:SHOWN_FILES]) + more


def folder_kind(folder: str) -> str:
    """The one kind whose files `folder` holds; an error naming it and its files otherwise."""
    marks = folder_marks(folder)
    if len(marks) == 1:
        return next(iter(marks))
    if not marks:
        raise ConfigurationError(
            f"{folder}: neither {MODEL_ARCHIVE}, nor {ELMO_FILES}, nor {MANYLANGS}; it holds "
            f"{shown(visible_files(folder))}"
        )
    raise ConfigurationError(
        f"{folder}: holds the files of more than one kind of biLM folder: "
        + "; ".join(f"{kind}: {shown(found)}" for kind, found in marks.items())
        + "; give a folder of one kind"
    )


def resolve_bilm_source(given: SourceSpec) -> BilmSource:
    """A path or URL, or `[options, weights]` -> its kind and local files. Anything but a folder
    is a MODEL_ARCHIVE (a `model.tar.gz`); a folder is the one kind its files mark."""
    if not given:
        raise ConfigurationError(
            "no biLM given: give a model archive, a folder of ELMo files (one *options.json and "
            "one *weights.hdf5) or [options, weights], or an ELMoForManyLangs folder"
        )
    if not isinstance(given, str):
        pair = resolve_pair(given)
        return BilmSource(ELMO_FILES, pair.name, pair.options_file, pair)
    path = local_path(given, "biLM archive or folder")
    if not os.path.isdir(path):
        return BilmSource(MODEL_ARCHIVE, given, path)
    kind = folder_kind(path)
    return BilmSource(
        kind, given, path, resolve_folder(path, given) if kind == ELMO_FILES else None
    )


def _one(folder: str, names: list[str], suffix: str, required: bool) -> Optional[str]:
    found = [name for name in names if name.endswith(suffix)]
    if len(found) == 1:
        return os.path.join(folder, found[0])
    if found or required:
        raise ElmoFilesError(
            f"{folder}: an ELMo folder needs exactly one *{suffix}"
            f"{'' if required else ' or none'}, found {len(found)}: {found or 'none'} "
            f"(files in it: {names or 'none'})"
        )
    return None


def resolve_folder(folder: str, name: str) -> ElmoSource:
    """A local folder -> its ELMo files; an error naming the folder and the files found when
    the options or weights file is missing or not unique."""
    names = visible_files(folder)
    options_file = _one(folder, names, OPTIONS_FILE, required=True)
    weights_file = _one(folder, names, WEIGHTS_FILE, required=True)
    assert options_file is not None and weights_file is not None
    return ElmoSource(
        name=name,
        options_file=options_file,
        weights_file=weights_file,
        softmax_file=_one(folder, names, SOFTMAX_FILE, required=False),
        vocab_file=_one(folder, names, VOCAB_FILE, required=False),
    )


def resolve_pair(pair: Sequence[str]) -> ElmoSource:
    """`[options, weights]` (paths or URLs) -> local paths."""
    pair = list(pair)
    if len(pair) != 2 or not all(isinstance(path, str) for path in pair):
        raise ElmoFilesError(f"ELMo files must be a folder or [options, weights], not {pair!r}")
    return ElmoSource(
        name=f"{pair[0]} + {pair[1]}",
        options_file=local_path(pair[0], "ELMo options file"),
        weights_file=local_path(pair[1], "ELMo weights file"),
    )
