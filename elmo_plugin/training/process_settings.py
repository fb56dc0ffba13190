"""`ProcessSettings`: the process-wide settings a command applies once, when it starts running
the model: glibc's heap thresholds and torch's TF32 flags.

They are set only by a command's runner: the `elmo_process_settings` trainer callback
(`allennlp train`), the `elmo_evaluator` evaluator (`allennlp evaluate`), our predictors
(`allennlp predict`) and `allennlp elmo-embed`'s flags; never by importing, building or calling
a module.
"""

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import torch

from elmo_plugin.training.glibc_heap import keep_freed_heap

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessSettings:
    """
    # Parameters

    keep_freed_heap : `bool`, optional (default = `True`)
        Keep freed CPU memory in the process (glibc `mallopt`: mmap threshold 32 MiB, trim
        threshold 1 GiB), so that a CPU step reuses it instead of faulting in fresh pages;
        memory stays at its peak. Left alone where the environment sets glibc's own
        `MALLOC_TRIM_THRESHOLD_`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TOP_PAD_` or
        `GLIBC_TUNABLES` (yours win), and on a C library other than glibc.
    tf32 : `bool`, optional (default = `None`)
        `true` / `false` lets (or stops) float32 matmuls and convolutions on Ampere and later
        GPUs use TF32 (`torch.backends.cuda.matmul.allow_tf32` and
        `torch.backends.cudnn.allow_tf32`); unset leaves torch's defaults.
    """

    keep_freed_heap: bool = True
    tf32: Optional[bool] = None

    def apply(self, environ: Mapping[str, str] = os.environ) -> None:
        """Sets the settings for the whole process; `environ` is where glibc's own malloc
        variables are looked for. One log line says what was set."""
        done = [keep_freed_heap(environ) if self.keep_freed_heap else "heap left as it is"]
        if self.tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = self.tf32
            torch.backends.cudnn.allow_tf32 = self.tf32
            done.append(f"TF32 {'on' if self.tf32 else 'off'}")
        else:
            done.append("TF32 as torch's defaults")
        logger.info("process settings: %s", "; ".join(done))
