"""Which computations a device runs, asked here only: the GPU's paths (fixed shapes, no host
reads: `elmo_lstm`'s whole-sequence clipped LSTM, `elmo_char_cnn`'s `reference`, `elmo-embed`'s
fixed-shape batches) on CUDA, the CPU's fast paths on the CPU. Inside `gpu_path_on_cpu` the CPU
runs the GPU's paths, where tests and the step audit check them."""

import contextlib
import contextvars
from collections.abc import Iterator

import torch

_CPU_TAKES_GPU_PATH = contextvars.ContextVar("cpu_takes_gpu_path", default=False)


def takes_gpu_path(device: torch.device) -> bool:
    """Whether tensors on `device` run the GPU's paths: on CUDA, on the CPU inside
    `gpu_path_on_cpu`."""
    return device.type == "cuda" or (device.type == "cpu" and _CPU_TAKES_GPU_PATH.get())


def takes_cpu_path(device: torch.device) -> bool:
    """Whether tensors on `device` run the CPU's fast paths: on the CPU, outside
    `gpu_path_on_cpu`."""
    return device.type == "cpu" and not _CPU_TAKES_GPU_PATH.get()


@contextlib.contextmanager
def gpu_path_on_cpu() -> Iterator[None]:
    """Within the block (in this thread), CPU tensors run the GPU's paths."""
    token = _CPU_TAKES_GPU_PATH.set(True)
    try:
        yield
    finally:
        _CPU_TAKES_GPU_PATH.reset(token)
