"""The forward time loop of `packed_clipped_lstm` in C++ (`csrc/clipped_lstm_steps.cpp`): each
step's gate arithmetic (the gates' sigmoids, the memory update and clip, the tanh of the
memory, the hidden state) is one pass over the step's rows instead of about a dozen torch ops,
each of which reads and writes all of them. The matmuls are the same oneDNN calls and the
sigmoid is torch's own vectorized one, so the numbers equal the TorchScript loop's
(`packed_clipped_lstm.forward_steps`) within float32 rounding (torch finishes a tensor's last
few values in scalar code, which may round differently).

Built on first use by torch's `cpp_extension` (about 10 s), then cached in torch's extensions
folder (TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions) under a name that hashes this
source file's path and contents, torch's version and install and the CPU flags, so another
checkout, a changed source or another torch builds its own. Where it cannot be built (no C++
compiler or ninja) or ELMO_PLUGIN_CPP_LOOP=0, the TorchScript loop runs instead.
"""

import functools
import hashlib
import logging
import os
from collections.abc import Callable
from typing import Optional

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


def build_name(flags: list[str]) -> str:
    """The extension's name, unique to this source (path and contents), torch and flags: ninja
    does not see a changed torch header, and two checkouts must not rebuild each other's."""
    with open(SOURCE, "rb") as source:
        key = [SOURCE, source.read().hex(), torch.__version__, torch.__file__, *flags]
    return (
        "elmo_plugin_clipped_lstm_steps_" + hashlib.sha256("\n".join(key).encode()).hexdigest()[:16]
    )


@functools.cache
def compiled_forward_steps() -> Optional[Callable[..., None]]:
    """`torch.ops.elmo_plugin.clipped_lstm_steps` (the arguments of `forward_steps`), built once
    per process, or None where it cannot be built or is switched off."""
    if os.environ.get("ELMO_PLUGIN_CPP_LOOP", "1") == "0":
        return None
    flags = ["-O3", *VECTOR_FLAGS.get(torch.backends.cpu.get_cpu_capability(), [])]
    try:
        from torch.utils import cpp_extension  # imports setuptools: only where it is needed

        cpp_extension.load(
            name=build_name(flags), sources=[SOURCE], extra_cflags=flags, is_python_module=False
        )
    except Exception as error:  # noqa: BLE001  (no compiler, no ninja, a failed build: the TorchScript loop)
        cause = (str(error).strip().splitlines() or [type(error).__name__])[
            0
        ]  # not the whole compiler log
        logger.warning(
            "The C++ LSTM loop could not be built (%s): the TorchScript loop runs instead, slower",
            cause,
        )
        return None
    return torch.ops.elmo_plugin.clipped_lstm_steps
