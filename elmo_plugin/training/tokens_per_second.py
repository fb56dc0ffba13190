"""TrainerCallback `tokens_per_second`: training throughput in target tokens per second, to
TensorBoard."""

import time
from typing import Any, Optional

import torch
from allennlp.common.util import is_global_primary
from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.training.scalar_events import ScalarEvents


@TrainerCallback.register("tokens_per_second")
class TokensPerSecondCallback(TrainerCallback):
    """
    Writes `train/tokens_per_second` to `SERIALIZATION_DIR/log/train` every `summary_interval`
    batches, at the step allennlp's `tensorboard` callback uses for its batch scalars (batches
    completed + 1), so the curves line up. Tokens = the model output's `batch_weight` (the
    biLM's forward targets: the words of each window + `</S>`, counted once for both
    directions), summed over the batches since the last point, divided by the wall-clock seconds
    between the two points (validation excluded: the window restarts with every epoch).
    Under DDP it is rank 0's throughput (multiply by the number of processes), written by rank 0
    only (once per run, not once per node).
    The counts are summed on the model's device and read once per point: no host sync per batch.
    A model without `batch_weight` (a tagger) logs nothing.

    # Parameters

    serialization_dir : `str`
        Given by allennlp: the run's folder.
    summary_interval : `int`, optional (default = `100`)
        Batches between two points.
    """

    def __init__(self, serialization_dir: str, summary_interval: int = 100) -> None:
        super().__init__(serialization_dir)
        self._summary_interval = summary_interval
        self._tokens: Optional[torch.Tensor] = None  # (), targets since the window started
        self._window_start: Optional[float] = None  # time.perf_counter() seconds
        self._events = ScalarEvents(serialization_dir, "train", ".tokens_per_second")

    def on_batch(
        self,
        trainer,
        batch_inputs: list[Any],
        batch_outputs: list[dict[str, Any]],
        batch_metrics: dict[str, Any],
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        batch_grad_norm: Optional[float] = None,
        **kwargs,
    ) -> None:
        if not is_training or not is_global_primary():
            return
        if self._window_start is None or batch_number <= 1:
            # First batch of an epoch: start the window after it (data loading warm-up excluded).
            self._window_start, self._tokens = time.perf_counter(), None
            return
        for output in batch_outputs:
            weight = output.get("batch_weight")
            if weight is not None:
                weight = weight.detach().float()
                self._tokens = weight if self._tokens is None else self._tokens + weight
        if self._tokens is None or trainer._total_batches_completed % self._summary_interval != 0:
            return
        tokens = self._tokens.item()  # the one host sync per point; the device is done after it
        now = time.perf_counter()
        self._events.add_scalar(
            "train/tokens_per_second",
            tokens / max(now - self._window_start, 1e-9),
            trainer._total_batches_completed + 1,
        )
        self._window_start, self._tokens = now, None

    def on_epoch(
        self, trainer, metrics: dict[str, Any], epoch: int, is_primary: bool = True, **kwargs
    ) -> None:
        self._window_start, self._tokens = None, None  # validation time is not training time

    def on_end(
        self,
        trainer,
        metrics: Optional[dict[str, Any]] = None,
        epoch: Optional[int] = None,
        is_primary: bool = True,
        **kwargs,
    ) -> None:
        self._events.close()
