"""The standard ELMo file names, and checked HDF5 reading and atomic writing for them.

Every read is validated: a missing file names the path, an unreadable (truncated / corrupt)
HDF5 file names the file, a dataset whose shape does not match options.json names the file,
the dataset and both shapes, and NaN / inf values name the file and the dataset.
"""

import os
from typing import Optional

import h5py
import numpy
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.data.full_disk import check_room
from elmo_plugin.data.output_file import OutputFile, hdf5_file

OPTIONS_FILE, WEIGHTS_FILE = "options.json", "weights.hdf5"
SOFTMAX_FILE, VOCAB_FILE = "softmax.hdf5", "vocab.txt"


class ElmoFilesError(ConfigurationError):
    """A problem with a standard ELMo file: the message names the file (and dataset)."""


def require_file(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise ElmoFilesError(f"ELMo {what} file not found: {path}")


class Hdf5Reader:
    """Reads float datasets from one HDF5 file with shape and finiteness checks."""

    def __init__(self, path: str, what: str, options_file: Optional[str] = None) -> None:
        require_file(path, what)
        self.path = path
        self._against = f"{options_file} implies" if options_file else "expected"
        self._read: set[str] = set()
        try:
            self._file = h5py.File(path, "r")
        except OSError as error:
            raise ElmoFilesError(
                f"{path}: cannot open as HDF5 (truncated or corrupt file?): {error}"
            ) from None

    def __enter__(self) -> "Hdf5Reader":
        return self

    def __exit__(self, *exc_info) -> None:
        self._file.close()

    def shape(self, name: str) -> tuple[int, ...]:
        try:
            if name not in self._file:
                raise ElmoFilesError(f"{self.path}: dataset {name} is missing")
            return tuple(self._file[name].shape)
        except (OSError, RuntimeError, KeyError) as error:
            raise ElmoFilesError(
                f"{self.path}: cannot read dataset {name} (truncated or corrupt file?): {error}"
            ) from None

    def read(self, name: str, expected_shape: tuple[int, ...]) -> numpy.ndarray:
        shape = self.shape(name)
        if shape != tuple(expected_shape):
            raise ElmoFilesError(
                f"{self.path}: dataset {name} has shape {shape} but {self._against} "
                f"{tuple(expected_shape)}"
            )
        self._read.add(name)
        try:
            array = numpy.asarray(self._file[name][...], dtype=numpy.float32)
        except (OSError, RuntimeError, ValueError, TypeError) as error:
            raise ElmoFilesError(
                f"{self.path}: cannot read dataset {name} (truncated or corrupt file?): {error}"
            ) from None
        bad = int(array.size - numpy.isfinite(array).sum())
        if bad:
            raise ElmoFilesError(f"{self.path}: dataset {name} holds {bad} NaN or inf values")
        return array

    def refuse_unread(self) -> None:
        """An error naming the datasets no `read` took (weights of more layers or highway layers
        than the options say: left out, they would change every vector silently)."""
        names: list[str] = []
        self._file.visititems(
            lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None
        )
        unread = sorted(set(names) - self._read)
        if unread:
            raise ElmoFilesError(
                f"{self.path}: {len(unread)} datasets are not part of the biLM {self._against} "
                f"(more layers or highway layers than it?), e.g. {unread[0]}"
            )


def finite(name: str, array: numpy.ndarray, path: str) -> numpy.ndarray:
    bad = int(array.size - numpy.isfinite(array).sum())
    if bad:
        raise ElmoFilesError(f"refusing to write {path}: {name} holds {bad} NaN or inf values")
    return numpy.ascontiguousarray(array, dtype=numpy.float32)


def to_numpy(tensor: torch.Tensor) -> numpy.ndarray:
    return tensor.detach().cpu().float().numpy()


def copy_into(parameter: torch.Tensor, value: numpy.ndarray) -> None:
    with torch.no_grad():
        parameter.copy_(torch.from_numpy(numpy.ascontiguousarray(value)).to(parameter))


def write_hdf5(path: str, arrays: dict[str, numpy.ndarray]) -> None:
    """The arrays (checked finite) as datasets of `path`, written whole (`OutputFile`: a killed
    export leaves no weights.hdf5); a DiskFull naming `path`, before HDF5 writes, when the disk
    has no room."""
    checked = {name: finite(name, array, path) for name, array in arrays.items()}
    with OutputFile(path, mode="wb") as output:
        check_room(output.temporary, sum(array.nbytes for array in checked.values()), path)
        with hdf5_file(output) as out:
            for name, array in checked.items():
                out.create_dataset(name, data=array)
