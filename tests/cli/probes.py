"""Trainer callbacks that let CLI tests see inside `allennlp train` (`--include-package
tests.cli.probes`, repo root on PYTHONPATH).

`checkpoint_probe`: with $CHECKPOINT_PROBE_KILL set, the
training process kills itself (SIGKILL) after the first training batch that follows a complete
checkpoint (allennlp saves a checkpoint synchronously after each epoch, before the next epoch's
first batch). With $CHECKPOINT_PROBE_RECORD=PATH, `on_start`, which allennlp calls after restoring
a checkpoint, saves the model's state_dict to PATH. `hold_probe`: the run waits before its first
batch until the test lets it go. `file_size_probe`: with $FILE_SIZE_PROBE_LIMIT set, `on_start`
limits every file written from then on to that many bytes (tests/cli/file_size_limit.py's limit,
set once the config and vocabulary are written)."""

import atexit
import json
import os
import resource
import signal

import torch
from allennlp.training.callbacks.callback import TrainerCallback


class TrainingBatchProbe(TrainerCallback):
    """allennlp's `on_batch` for training batches only: `training_batch(trainer, batch_inputs,
    batch_outputs, epoch, batch_number)`."""

    def on_batch(
        self,
        trainer,
        batch_inputs,
        batch_outputs,
        batch_metrics,
        epoch,
        batch_number,
        is_training,
        is_primary=True,
        batch_grad_norm=None,
        **kwargs,
    ) -> None:
        if is_training:
            self.training_batch(trainer, batch_inputs, batch_outputs, epoch, batch_number)

    def training_batch(self, trainer, batch_inputs, batch_outputs, epoch, batch_number) -> None:
        raise NotImplementedError


@TrainerCallback.register("checkpoint_probe")
class CheckpointProbe(TrainingBatchProbe):
    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        record = os.environ.get("CHECKPOINT_PROBE_RECORD")
        if record:
            torch.save(
                {name: value.clone() for name, value in trainer.model.state_dict().items()}, record
            )

    def training_batch(self, trainer, batch_inputs, batch_outputs, epoch, batch_number) -> None:
        if os.environ.get("CHECKPOINT_PROBE_KILL") and trainer._epochs_completed >= 1:
            os.kill(os.getpid(), signal.SIGKILL)


@TrainerCallback.register("target_counter")
class TargetCounter(TrainingBatchProbe):
    """With $TARGET_COUNTER_DIR set, each worker writes `rank{R}.json`: the number of training
    targets (the model's `batch_weight`) it trained on in each epoch."""

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        self._counts: dict[int, float] = {}

    def training_batch(self, trainer, batch_inputs, batch_outputs, epoch, batch_number) -> None:
        targets = sum(float(output.get("batch_weight", 0.0)) for output in batch_outputs)
        self._counts[epoch] = self._counts.get(epoch, 0.0) + targets

    def on_end(self, trainer, metrics=None, epoch=None, is_primary=True, **kwargs) -> None:
        folder = os.environ.get("TARGET_COUNTER_DIR")
        if folder:
            with open(os.path.join(folder, f"rank{trainer._rank}.json"), "w") as out:
                json.dump(self._counts, out)


@TrainerCallback.register("batch_recorder")
class BatchRecorder(TrainingBatchProbe):
    """With $BATCH_RECORDER_DIR set, each worker appends to `rank{R}.jsonl` one line per training
    batch: epoch, batch number in the epoch, the batch's rows of target ids (padding cut, rows of
    padding alone too) and the shape of its token ids.
    With $BATCH_RECORDER_KILL="E,B", the process kills itself (SIGKILL) at batch B of epoch E,
    before that batch's checkpoint would be saved."""

    def training_batch(self, trainer, batch_inputs, batch_outputs, epoch, batch_number) -> None:
        folder = os.environ.get("BATCH_RECORDER_DIR")
        if not folder:
            return
        tokens = [batch["source"]["tokens"]["tokens"] for batch in batch_inputs]
        rows = [[int(i) for i in row if i] for ids in tokens for row in ids.tolist() if any(row)]
        shapes = [list(ids.shape) for ids in tokens]
        line = {"epoch": epoch, "batch": batch_number, "rows": rows, "shapes": shapes}
        with open(os.path.join(folder, f"rank{trainer._rank}.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\n")
        if os.environ.get("BATCH_RECORDER_KILL") == f"{epoch},{batch_number}":
            os.kill(os.getpid(), signal.SIGKILL)


@TrainerCallback.register("hold_probe")
class HoldProbe(TrainerCallback):
    """With $HOLD_PROBE_FIFO naming a FIFO that exists, `on_start` (every callback built, before
    the first batch) reads it to its end: the run waits there until the test that opened it for
    writing closes it. A run that starts once the FIFO is removed is not held."""

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        fifo = os.environ.get("HOLD_PROBE_FIFO")
        if fifo and os.path.exists(fifo):
            with open(fifo) as held:
                held.read()


@TrainerCallback.register("file_size_probe")
class FileSizeProbe(TrainerCallback):
    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        limit = os.environ.get("FILE_SIZE_PROBE_LIMIT")
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), hard))
            # lifted at exit, before `make coverage`'s data file of this process is written
            atexit.register(resource.setrlimit, resource.RLIMIT_FSIZE, (soft, hard))
