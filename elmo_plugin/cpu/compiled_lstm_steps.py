"""The CPU fast path's time loops in C++ (`csrc/clipped_lstm_steps.cpp`), forward and backward:
each step's gate arithmetic (or gate-gradient arithmetic) is one pass over the step's rows, and
the step's matmuls are oneDNN's with prepacked weights, called through torch's dispatcher.

Built on first use by torch's `cpp_extension`, then cached in torch's extensions folder
(TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions) under a name that hashes this source
file's path and contents, torch's version and install and the CPU flags, so another checkout, a
changed source or another torch builds its own. Where it cannot be built (no C++ compiler or
ninja, a failed build) one warning says so and `elmo_lstm` runs its reference loop.
"""

import functools
import hashlib
import logging
import os
from collections.abc import Callable
from typing import NamedTuple, Optional

import torch

logger = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(__file__), "csrc", "clipped_lstm_steps.cpp")
# the vector instructions torch's own kernels use on this CPU (its ATen/cpu/vec headers)
VECTOR_FLAGS = {
    "AVX512": [
        "-mavx512f",
        "-mavx512bw",
        "-mavx512vl",
        "-mavx512dq",
        "-mavx2",
        "-mfma",
        "-DCPU_CAPABILITY_AVX512",
    ],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}


class CompiledSteps(NamedTuple):
    """The two ops the extension registers (their arguments: the schemas in the source)."""

    forward: Callable[..., None]  # torch.ops.elmo_plugin.clipped_lstm_forward_steps
    backward: Callable[..., None]  # torch.ops.elmo_plugin.clipped_lstm_backward_steps


def build_name(flags: list[str]) -> str:
    """The extension's name, unique to this source (path and contents), torch and flags: ninja
    does not see a changed torch header, and two checkouts must not rebuild each other's."""
    with open(SOURCE, "rb") as source:
        key = [SOURCE, source.read().hex(), torch.__version__, torch.__file__, *flags]
    digest = hashlib.sha256("\n".join(key).encode()).hexdigest()[:16]
    return f"elmo_plugin_clipped_lstm_steps_{digest}"


@functools.cache
def compiled_steps() -> Optional[CompiledSteps]:
    """The C++ time loops, built once per process, or None (with one warning) where they cannot
    be built."""
    flags = ["-O3", *VECTOR_FLAGS.get(torch.backends.cpu.get_cpu_capability(), [])]
    try:
        from torch.utils import cpp_extension  # imports setuptools: only where it is needed

        cpp_extension.load(
            name=build_name(flags), sources=[SOURCE], extra_cflags=flags, is_python_module=False
        )
    except Exception as error:  # noqa: BLE001  (no compiler, no ninja, a failed build)
        lines = str(error).strip().splitlines() or [type(error).__name__]
        logger.warning(
            "The C++ LSTM loops could not be built (%s): the reference loop runs instead, slower",
            lines[0],  # not the whole compiler log
        )
        return None
    ops = torch.ops.elmo_plugin
    return CompiledSteps(ops.clipped_lstm_forward_steps, ops.clipped_lstm_backward_steps)
