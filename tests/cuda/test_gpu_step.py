"""CUDA: a training step of the original configs (shrunk) never waits for the host: batches
from pinned memory, forward, backward, clipping and the optimizer step run under
`torch.cuda.set_sync_debug_mode("error")`. Skipped without CUDA (one line);
`ELMO_CUDA_TESTS_DEVICE=cpu` runs its logic on the CPU (it proves nothing about CUDA)."""

import contextlib
import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

from benchmarks.step_audit import CONFIGS, SHRUNK, SHRUNK_CONTEXTUALIZER, AuditedStep

DEVICE = os.environ.get("ELMO_CUDA_TESTS_DEVICE", "cuda:0")
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    pytest.skip("CUDA tests: no CUDA device here", allow_module_level=True)
GPU = torch.device(DEVICE)


class Unrecorded:
    """What `AuditedStep.step` asks of an audit, recording nothing."""

    def run(self, phase: str, function: Callable[[], Any]) -> Any:
        return function()

    def on_host(self, tensors: Any) -> None:
        pass


@contextlib.contextmanager
def syncs_are_errors():
    if GPU.type != "cuda":
        yield
        return
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_step_of_the_original_config_never_waits_for_the_host(name):
    """Two warm-up steps (optimizer state, compiled LSTM steps), then three steps in which any
    host-device synchronization raises; the loss is finite and the parameters moved."""
    run = AuditedStep(CONFIGS[name], {**SHRUNK, **SHRUNK_CONTEXTUALIZER[name]}, GPU)
    for _ in range(2):
        run.step(Unrecorded())
    before = [p.detach().clone() for p in run.model.parameters()]
    with syncs_are_errors():
        for _ in range(3):
            run.step(Unrecorded())
    assert all(torch.isfinite(p).all() for p in run.model.parameters())
    moved = [not torch.equal(p, b) for p, b in zip(run.model.parameters(), before, strict=True)]
    assert sum(moved) > len(moved) // 2
