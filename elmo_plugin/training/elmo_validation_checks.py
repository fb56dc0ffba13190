"""Trainer callback `elmo_validation_checks`: validation every N batches inside an epoch, for
epochs that take hours. Each check is logged to `validation_checks.jsonl` in the serialization
folder and to TensorBoard (`log/checks`, the global batch as the step); the best
check's weights become `model_best_check.tar.gz` at the end; the learning rate can be reduced
when the checks stop improving. Its state is part of every checkpoint, so `allennlp train -r`
continues the schedule, the best-so-far and the plateau count as if never stopped."""

import copy
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.common.util import is_global_primary
from allennlp.models.archival import archive_model
from allennlp.training.callbacks.callback import TrainerCallback
from allennlp.training.metrics.metric import Metric

from elmo_plugin.data.output_file import OutputFile, open_to_append
from elmo_plugin.training.scalar_events import ScalarEvents

logger = logging.getLogger(__name__)

CHECKS_FILE = "validation_checks.jsonl"
BEST_WEIGHTS = "best_check.th"
BEST_ARCHIVE = "model_best_check.tar.gz"


@dataclass
class Check:
    """One check: where in training it ran, the model's metrics on the sample, and whether it
    was the best so far."""

    batch: int  # global batch (allennlp's total batches completed)
    epoch: int
    batch_in_epoch: int
    metrics: dict[str, float]
    best: bool
    learning_rate: float


@TrainerCallback.register("elmo_validation_checks")
class ValidationChecksCallback(TrainerCallback):
    """
    # Parameters

    every_num_batches : `int`
        A check after every this many training batches (global, counted over epochs).
    max_batches : `int`, optional (default = `None`)
        Each check reads only the first this many batches of the validation data loader (the same
        sample every time), so it costs seconds; `None` reads all of it.
    validation_metric : `str`, optional (default = `"-perplexity"`)
        The model metric that decides the best check, `-` for lower is better, `+` for higher.
    lr_patience : `int`, optional (default = `None`)
        After this many checks in a row without a new best, every learning rate is multiplied by
        `lr_factor` (and the count starts again). `None`: the learning rate is left alone. Use it
        instead of, not beside, a learning-rate scheduler.
    lr_factor : `float`, optional (default = `0.5`)
    keep_best : `bool`, optional (default = `True`)
        Keep the best check's weights (`best_check.th`) and archive them at the end as
        `model_best_check.tar.gz` beside allennlp's `model.tar.gz` (which holds the best
        per-epoch validation, `best.th`).
    """

    def __init__(
        self,
        serialization_dir: str,
        every_num_batches: int,
        max_batches: Optional[int] = None,
        validation_metric: str = "-perplexity",
        lr_patience: Optional[int] = None,
        lr_factor: float = 0.5,
        keep_best: bool = True,
    ) -> None:
        super().__init__(serialization_dir)
        if every_num_batches < 1:
            raise ConfigurationError(
                f"callback elmo_validation_checks: every_num_batches must be at least 1, "
                f"got {every_num_batches}"
            )
        if validation_metric[:1] not in ("-", "+"):
            raise ConfigurationError(
                f"callback elmo_validation_checks: validation_metric must start with - or +, "
                f"got {validation_metric!r}"
            )
        self.every_num_batches = every_num_batches
        self.max_batches = max_batches
        self.metric_name, self.lower_is_better = validation_metric[1:], validation_metric[0] == "-"
        self.lr_patience = lr_patience
        self.lr_factor = lr_factor
        self.keep_best = keep_best
        self.history: list[Check] = []
        self.checks_without_best = 0
        self._events = ScalarEvents(serialization_dir, "checks")
        self._sample: Optional[list] = None  # the first max_batches validation batches
        self.enabled = True  # False without validation data (set in on_start)

    # --- checkpointed state ---

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": [asdict(check) for check in self.history],
            "checks_without_best": self.checks_without_best,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = [Check(**check) for check in state_dict["history"]]
        self.checks_without_best = state_dict["checks_without_best"]

    # --- trainer hooks ---

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        self.enabled = trainer._validation_data_loader is not None
        if not self.enabled:
            logger.warning("elmo_validation_checks: no validation data: no checks in this run")
            return
        before_any_batch = trainer.model.get_metrics()
        if before_any_batch:  # a model that names its metrics already: checked now, not hours on
            self.require_metric(before_any_batch)
        epoch_batches = loader_length(trainer.data_loader)
        if epoch_batches is not None and self.every_num_batches > epoch_batches:
            logger.warning(
                "elmo_validation_checks: every_num_batches %d is more than an epoch's %d batches: "
                "no check inside most epochs, validation runs only at epoch ends (allennlp's); "
                "lower every_num_batches for checks inside the epoch",
                self.every_num_batches,
                epoch_batches,
            )
        # The fixed sample: the validation loader's first batches, read once per run (a resumed
        # run reads the same ones).
        self._sample = (
            None if self.max_batches is None else first_batches(trainer, self.max_batches)
        )
        if is_global_primary():  # once per run, not once per node
            # A resumed run's history is the checkpoint's: checks written after it are dropped.
            with OutputFile(self.path(CHECKS_FILE)) as out:
                out.file.writelines(json.dumps(asdict(check)) + "\n" for check in self.history)

    def on_batch(
        self,
        trainer,
        batch_inputs,
        batch_outputs,
        batch_metrics,
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        batch_grad_norm: Optional[float] = None,
        **kwargs,
    ) -> None:
        if (
            self.enabled
            and is_training
            and trainer._total_batches_completed % self.every_num_batches == 0
        ):
            self.check(trainer, epoch, batch_number)

    def on_end(self, trainer, metrics=None, epoch=None, is_primary: bool = True, **kwargs) -> None:
        self._events.close()
        if is_global_primary() and self.keep_best and os.path.exists(self.path(BEST_WEIGHTS)):
            with OutputFile(self.path(BEST_ARCHIVE), mode="wb") as whole:  # never via a link
                archive_model(
                    self.serialization_dir, weights=BEST_WEIGHTS, archive_path=whole.temporary
                )
            logger.info("the best validation check's model: %s", self.path(BEST_ARCHIVE))

    # --- one check ---

    def require_metric(self, metrics: dict[str, float]) -> None:
        """An error naming the metric when the model's `metrics` lack it."""
        if self.metric_name not in metrics:
            raise ConfigurationError(
                f"callback elmo_validation_checks: the model has no metric {self.metric_name!r} "
                f"(it has {sorted(metrics)})"
            )

    def check(self, trainer, epoch: int, batch_in_epoch: int) -> Check:
        """Validates on the sample, records the check and acts on it (the same decision in every
        distributed process: the metrics are reduced over them); logs one line with its result, its
        wall seconds (validation, records and the best weights written) and the validation's."""
        start = time.perf_counter()
        batches = trainer._validation_data_loader if self._sample is None else self._sample
        metrics = validation_metrics(trainer, batches)
        validated = time.perf_counter()
        self.require_metric(metrics)
        value = metrics[self.metric_name]
        earlier = [check.metrics[self.metric_name] for check in self.history]
        best = not earlier or (
            value < min(earlier) if self.lower_is_better else value > max(earlier)
        )
        self.checks_without_best = 0 if best else self.checks_without_best + 1
        if self.lr_patience is not None and self.checks_without_best >= self.lr_patience:
            for group in trainer.optimizer.param_groups:
                group["lr"] *= self.lr_factor
            self.checks_without_best = 0
            logger.info(
                "elmo_validation_checks: no better check in %d: lr x %g",
                self.lr_patience,
                self.lr_factor,
            )
        check = Check(
            batch=trainer._total_batches_completed,
            epoch=epoch,
            batch_in_epoch=batch_in_epoch,
            metrics=metrics,
            best=best,
            learning_rate=trainer.optimizer.param_groups[0]["lr"],
        )
        self.history.append(check)
        if is_global_primary():
            self.record(check, trainer)
        logger.info(
            "elmo_validation_checks: check at batch %d: %s %.4g%s in %.2f s (validation %.2f s)",
            check.batch,
            self.metric_name,
            value,
            " (best so far)" if best else "",
            time.perf_counter() - start,
            validated - start,
        )
        return check

    def record(self, check: Check, trainer) -> None:
        with open_to_append(self.path(CHECKS_FILE)) as out:
            out.write(json.dumps(asdict(check)) + "\n")
        for name, value in check.metrics.items():
            self._events.add_scalar(name, value, check.batch)
        self._events.add_scalar("learning_rate", check.learning_rate, check.batch)
        if check.best and self.keep_best:
            with OutputFile(self.path(BEST_WEIGHTS), mode="wb") as best:
                torch.save(trainer.model.state_dict(), best.file)

    def path(self, name: str) -> str:
        return os.path.join(self.serialization_dir, name)


def loader_length(loader) -> Optional[int]:
    """A data loader's batches per epoch; None for one without a length."""
    try:
        return len(loader)
    except TypeError:
        return None


def first_batches(trainer, count: int) -> list:
    """The first `count` batches of the trainer's validation data loader."""
    batches = []
    for batch in trainer._validation_data_loader:
        batches.append(batch)
        if len(batches) == count:
            break
    return batches


def validation_metrics(trainer, batches) -> dict[str, float]:
    """The model's metrics over `batches`, in eval mode without gradients; the model's running
    training metrics are put back as they were, in place (`restored`)."""
    model = trainer.model
    running = {name: value for name, value in vars(model).items() if isinstance(value, Metric)}
    saved = copy.deepcopy(running)
    for metric in running.values():
        metric.reset()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                trainer.batch_outputs(batch, for_training=False)
        return model.get_metrics(reset=True)
    finally:
        model.train(was_training)
        for name, metric in saved.items():
            restored(running[name], metric)


def restored(metric: Metric, saved: Metric) -> None:
    """`metric`'s state set back to `saved`'s: its tensors copied into its own buffers (a step
    captured in a CUDA graph keeps adding into them), the rest of its attributes replaced."""
    for name, value in vars(saved).items():
        current = getattr(metric, name, None)
        if torch.is_tensor(current) and torch.is_tensor(value) and current.shape == value.shape:
            current.copy_(value)
        else:
            setattr(metric, name, value)
