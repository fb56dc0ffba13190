"""A training's log files stopped by a full disk with one line.

allennlp logs a training run to `out.log` (`out_worker<rank>.log` per process of a distributed
run) in its serialization folder. Once that file cannot be written, Python's logging reports the
failure with a `--- Logging error ---` traceback on stderr for every line that follows, and the
run goes on. Through `StopsAtFullDisk` the first full-disk error is one error line naming the file,
which is then written no more; the console's log goes on."""

import logging
import os

from elmo_plugin.data.full_disk import DiskFull, StopsAtFullDisk

logger = logging.getLogger(__name__)


def _logged(error: DiskFull) -> None:
    logger.error("%s (the log goes on here, not in the file)", error)


def stop_log_files_at_full_disk(serialization_dir: str) -> None:
    """The root logger's log files in `serialization_dir` (allennlp's `out.log` handler, which
    its `tqdm` logger shares) written through `StopsAtFullDisk`, which logs its one error."""
    folder = os.path.abspath(serialization_dir)
    for handler in logging.getLogger().handlers:
        if (
            isinstance(handler, logging.FileHandler)
            and os.path.dirname(handler.baseFilename) == folder
        ):
            stream = StopsAtFullDisk(handler.stream, handler.baseFilename, on_full=_logged)
            handler.setStream(stream)  # type: ignore[arg-type]
