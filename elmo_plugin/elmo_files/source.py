"""Where a published (or exported) ELMo's files are: a folder, or an options + weights pair.

A folder must hold exactly one `*options.json` and one `*weights.hdf5`, under any names (the
published downloads are named like `elmo_2x4096_512_2048cnn_2xhighway_options.json`); it may hold
one `*softmax.hdf5` and one `*vocab.txt`. A pair is `[options, weights]`. Paths and URLs both
work: each goes through allennlp's `cached_path` (a URL is downloaded once into its cache).
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional, Union

from allennlp.common.file_utils import cached_path

from elmo_plugin.elmo_files.layout import ElmoFilesError

OPTIONS_SUFFIX, WEIGHTS_SUFFIX = "options.json", "weights.hdf5"
SOFTMAX_SUFFIX, VOCAB_SUFFIX = "softmax.hdf5", "vocab.txt"

# What `resolve_elmo_source` accepts: a folder (path or URL), or [options, weights].
ElmoSourceSpec = Union[str, Sequence[str]]


@dataclass(frozen=True)
class ElmoSource:
    """Local paths of one ELMo's files; `softmax_file` and `vocab_file` are None when absent.
    `name` is the source as given (the folder, or "options + weights"), for messages."""

    name: str
    options_file: str
    weights_file: str
    softmax_file: Optional[str] = None
    vocab_file: Optional[str] = None


def local_path(path_or_url: str, what: str) -> str:
    """A local path as it is, a URL downloaded to allennlp's cache; else an error naming it."""
    if os.path.exists(path_or_url):
        return path_or_url
    try:
        return str(cached_path(path_or_url))
    except (OSError, ValueError) as error:
        raise ElmoFilesError(f"ELMo {what} not found: {path_or_url} ({error})") from None


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


def resolve_folder(folder: str, name: Optional[str] = None) -> ElmoSource:
    """A local folder -> its ELMo files; an error naming the folder and the files found when
    the options or weights file is missing or not unique."""
    names = sorted(entry for entry in os.listdir(folder) if not entry.startswith("."))
    options_file = _one(folder, names, OPTIONS_SUFFIX, required=True)
    weights_file = _one(folder, names, WEIGHTS_SUFFIX, required=True)
    assert options_file is not None and weights_file is not None
    return ElmoSource(
        name=name or folder,
        options_file=options_file,
        weights_file=weights_file,
        softmax_file=_one(folder, names, SOFTMAX_SUFFIX, required=False),
        vocab_file=_one(folder, names, VOCAB_SUFFIX, required=False),
    )


def resolve_elmo_source(source: ElmoSourceSpec) -> ElmoSource:
    """A folder (path or URL of one) or `[options, weights]` (paths or URLs) -> local paths."""
    if not source:
        raise ElmoFilesError(
            "no ELMo files given: set model.pretrained_file to a folder with one *options.json and "
            "one *weights.hdf5, or to [options, weights] (or use `allennlp elmo-continue SOURCE`)"
        )
    if isinstance(source, str):
        folder = local_path(source, "folder")
        if not os.path.isdir(folder):
            raise ElmoFilesError(
                f"{source} is not a folder: give a folder with one *options.json and one "
                "*weights.hdf5, or the pair [options, weights]"
            )
        return resolve_folder(folder, source)
    pair = list(source)
    if len(pair) != 2 or not all(isinstance(path, str) for path in pair):
        raise ElmoFilesError(f"ELMo files must be a folder or [options, weights], not {pair!r}")
    return ElmoSource(
        name=f"{pair[0]} + {pair[1]}",
        options_file=local_path(pair[0], "options file"),
        weights_file=local_path(pair[1], "weights file"),
    )
