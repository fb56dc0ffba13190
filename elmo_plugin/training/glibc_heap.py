"""Keep freed CPU tensor memory in the process (glibc's malloc), so that the next batch's
tensors of the same sizes reuse it instead of faulting in fresh pages from the kernel.

A CPU training step allocates and frees tensors of several MB many times (gates, gradients,
prepacked weights). glibc's defaults hand memory back to the kernel when more than twice the
largest recent block lies free at the top of the heap, so such a step faults in many fresh
(zeroed) pages each time. `keep_freed_heap` sets two of glibc's documented `mallopt`
parameters for the whole process: blocks up to 32 MiB (glibc's maximum for the mmap threshold)
come from the heap, and up to 1 GiB freed at its top stays there. Memory then stays at its peak
instead of shrinking between batches.

Called only by `ProcessSettings.apply` (the `keep_freed_heap` option), never by a module.
"""

import ctypes
import logging
import platform
from collections.abc import Mapping

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # <malloc.h>
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc refuses more (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
TRIM_THRESHOLD_BYTES = 1 << 30
# glibc's own settings: where the user set any of them, theirs win.
USER_SETTINGS = (
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
)


def user_heap_settings(environ: Mapping[str, str]) -> list[str]:
    """The glibc malloc variables (`USER_SETTINGS`) set in `environ`."""
    return [name for name in USER_SETTINGS if name in environ]


def is_glibc() -> bool:
    """Whether this process runs on Linux with glibc (elsewhere `mallopt` may not exist)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def mallopt(parameter: int, value: int) -> int:
    """glibc's `mallopt(parameter, value)` -> 1 on success, 0 on error."""
    return ctypes.CDLL(None).mallopt(parameter, value)


def keep_freed_heap(environ: Mapping[str, str]) -> str:
    """Sets glibc's mmap and trim thresholds unless `environ` (the process environment) holds
    glibc's own malloc settings or the C library is not glibc -> what was done, for the log."""
    user_settings = user_heap_settings(environ)
    if user_settings:
        return f"heap left to your {', '.join(user_settings)}"
    if not is_glibc():
        return "heap left as it is (not glibc)"
    # mmap threshold first: setting either one stops glibc adjusting the mmap threshold itself
    done = (
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )
    if not done:
        logger.warning(
            "glibc's mallopt refused the heap thresholds: CPU memory is managed as glibc's defaults"
        )
        return "heap left as it is (mallopt refused)"
    return (
        f"heap kept: mmap threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, "
        f"trim threshold {TRIM_THRESHOLD_BYTES >> 20} MiB"
    )
