"""The forward time loop of `packed_clipped_lstm` in C++ (`csrc/clipped_lstm_steps.cpp`): each
step's gate arithmetic (the gates' sigmoids, the memory update and clip, the tanh of the
memory, the hidden state) is one pass over the step's rows instead of about a dozen torch ops,
each of which reads and writes all of them. The matmuls are the same oneDNN calls, and the
sigmoid is torch's own vectorized one, so the numbers are the same as the TorchScript loop's
(`packed_clipped_lstm.forward_steps`).

Built on first use by torch's `cpp_extension` (about 10 s; cached in torch's extensions folder,
TORCH_EXTENSIONS_DIR, for this Python, torch and CPU). Where it cannot be built (no C++ compiler
or ninja) or ELMO_PLUGIN_CPP_LOOP=0, the TorchScript loop runs instead.
"""
import functools
import logging
import os
from typing import Callable, Optional

import torch

logger = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(__file__), "csrc", "clipped_lstm_steps.cpp")
# the vector instructions torch's own kernels use on this CPU (its ATen/cpu/vec headers)
VECTOR_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}


@functools.lru_cache(maxsize=None)
def compiled_forward_steps() -> Optional[Callable[..., None]]:
    """`torch.ops.elmo_plugin.clipped_lstm_steps` (the arguments of `forward_steps`), built once
    per process, or None where it cannot be built or is switched off."""
    if os.environ.get("ELMO_PLUGIN_CPP_LOOP", "1") == "0":
        return None
    capability = torch.backends.cpu.get_cpu_capability()
    flags = VECTOR_FLAGS.get(capability, [])
    try:
        from torch.utils import cpp_extension  # imports setuptools: only where it is needed

        cpp_extension.load(
            name=f"elmo_plugin_clipped_lstm_steps_{capability.lower()}", sources=[SOURCE],
            extra_cflags=["-O3", *flags], is_python_module=False,
        )
    except Exception as error:  # noqa: BLE001  (no compiler, no ninja, a failed build: the TorchScript loop)
        logger.warning("The C++ LSTM loop could not be built (%s): the TorchScript loop runs instead, slower", error)
        return None
    return torch.ops.elmo_plugin.clipped_lstm_steps
