"""Keep freed CPU tensor memory in the process (glibc's malloc), so that the next batch's
tensors of the same sizes reuse it instead of faulting in fresh pages from the kernel.

A CPU training step allocates and frees tensors of several MB many times (gates, gradients,
prepacked weights). glibc's defaults hand memory back to the kernel when more than twice the
largest recent block lies free at the top of the heap, so such a step can fault in tens of
thousands of fresh (zeroed) pages each time: 5-15% of a published-small training step here.
`keep_freed_heap` sets two of glibc's documented `mallopt` parameters once for the process:
blocks up to 32 MiB (glibc's maximum for the mmap threshold) come from the heap, and up to
1 GiB freed at its top stays there. Memory then stays at its peak instead of shrinking between
batches. Nothing changes where the user set glibc's own MALLOC_* variables or GLIBC_TUNABLES,
where ELMO_PLUGIN_KEEP_HEAP=0, or on a C library other than glibc.
"""

import ctypes
import functools
import logging
import os
import platform

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc refuses more (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
TRIM_THRESHOLD_BYTES = 1 << 30
USER_SETTINGS = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
)


@functools.cache
def keep_freed_heap() -> bool:
    """Sets glibc's mmap and trim thresholds once per process -> whether they were set."""
    if os.environ.get("ELMO_PLUGIN_KEEP_HEAP", "1") == "0" or any(
        name in os.environ for name in USER_SETTINGS
    ):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    # mmap threshold first: setting either one stops glibc adjusting the mmap threshold itself
    done = (
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )
    if not done:
        logger.warning(
            "glibc's mallopt refused the heap thresholds: CPU tensors are allocated as glibc defaults"
        )
    return done
