"""Trainer callback `batch_record`, for the rehearsals' checks (`--include-package
benchmarks.batch_record`). Every process appends one JSON line per training batch to
FOLDER/rank{global rank}.jsonl: epoch, batch number in the epoch, wall-clock time (seconds since
the epoch, comparable across processes) and the batch's rows of token ids (padding cut, rows
of padding left out)."""

import json
import os
import time
from typing import Any, Optional

import torch.distributed as dist
from allennlp.training.callbacks.callback import TrainerCallback


@TrainerCallback.register("batch_record")
class BatchRecord(TrainerCallback):
    def __init__(self, serialization_dir: str, folder: str) -> None:
        super().__init__(serialization_dir)
        self.folder = folder

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
        if not is_training:
            return
        rows = [
            [int(i) for i in row if i]
            for batch in batch_inputs
            for row in batch["source"]["tokens"]["tokens"].tolist()
            if any(row)  # not a row of padding (`fixed_shape`)
        ]
        rank = dist.get_rank() if dist.is_initialized() else 0
        line = {"epoch": epoch, "batch": batch_number, "time": time.time(), "rows": rows}
        os.makedirs(self.folder, exist_ok=True)
        with open(os.path.join(self.folder, f"rank{rank}.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\n")
