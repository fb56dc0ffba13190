"""Trainer `elmo_graph_step`: allennlp's trainer with each training step replayed as one CUDA
graph."""

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Optional

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.training.callbacks.callback import TrainerCallback
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmo_plugin.training.lagged_readback import LaggedReadback
from elmo_plugin.training.step_graph import CaptureStream, StepGraph, WarmupStep

logger = logging.getLogger(__name__)

# The outputs the trainer reads on the host after a step (`loss.item()`, `reg_loss.item()`).
READ_ON_HOST = ("loss", "reg_loss")


def optimizer_options(optimizer: torch.optim.Optimizer, but: tuple[str, ...]) -> list[dict]:
    """Each parameter group's options (learning rate, ...) but `but`: what a captured step has
    built in."""
    return [
        {k: v for k, v in group.items() if k != "params" and k not in but}
        for group in optimizer.param_groups
    ]


def host_step_counters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The step counts an optimizer keeps on the CPU (torch's unless fused or capturable,
    `elmo_adagrad`'s rows): a captured step does not advance them, the trainer does."""
    return [
        state["step"]
        for state in optimizer.state.values()
        if torch.is_tensor(state.get("step")) and state["step"].device.type == "cpu"
    ]


@contextlib.contextmanager
def options_set(groups: list[dict[str, Any]], key: str, values: list[Any]) -> Iterator[None]:
    """Inside: each parameter group's option `key` is its value in `values`; after: as before."""
    before = [group.get(key) for group in groups]
    for group, value in zip(groups, values, strict=True):
        group[key] = value
    try:
        yield
    finally:
        for group, value in zip(groups, before, strict=True):
            group[key] = value


def fused_groups_capturable(
    optimizer: torch.optim.Optimizer,
) -> contextlib.AbstractContextManager[None]:
    """Inside: the parameter groups of torch's fused kernels (`fused_adam`) say `capturable`,
    which lets torch's check allow their capture; the fused kernels ignore the flag otherwise."""
    fused = [group for group in optimizer.param_groups if group.get("fused")]
    return options_set(fused, "capturable", [True] * len(fused))


@Trainer.register("elmo_graph_step", constructor="from_partial_objects")
class ElmoGraphStepTrainer(GradientDescentTrainer):
    """
    allennlp's `gradient_descent` trainer (the same options, callbacks, checkpoints and `-r`)
    whose training step runs as one CUDA graph on a CUDA device. After `warmup_batches` eager
    batches it captures forward, backward, the gradient clipping of `grad_norm` and
    `grad_clipping` and the optimizer step on one batch (`StepGraph`). It then replays that
    graph for every batch of the same shapes (`data_loader.fixed_shape: true` makes them one
    shape; a batch of another shape runs eagerly). What allennlp reads on the host after a step
    comes one step late (`LaggedReadback`), so the host never waits for the step it just
    queued: the batch loss and gradient norm that the progress bar, callbacks and TensorBoard
    get are the previous batch's; an epoch's `loss` is exact.

    With a `learning_rate_scheduler` the captured step reads each group's learning rate from a
    device tensor. Before each replay it is set to the rate the scheduler gives that batch (its
    `step_batch` with the batch number allennlp then gives it too). Without one, an optimizer
    option changed since the capture (`elmo_validation_checks`' `lr_patience`) is captured
    again.

    It runs eagerly, as `gradient_descent`, and says why in one log line: on a CPU, under
    distributed training, with `num_gradient_accumulation_steps` > 1, a momentum scheduler,
    `use_amp` or an optimizer `lr_decay` (counted on the host). So does a step that cannot be
    captured (one warning with the error's first line; training goes on), e.g. with a scheduler
    and an optimizer that takes no learning rate as a tensor.

    # Parameters

    warmup_batches : `int`, optional (default = `3`)
        Eager training batches before the capture: the optimizer's state, compiled kernels and
        whatever else is made once are made there, the last one on the stream that the capture
        then runs on (`CaptureStream`). At least 1.
    **kwargs :
        allennlp's `gradient_descent` trainer's parameters.
    """

    def __init__(self, *args: Any, warmup_batches: int = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if warmup_batches < 1:
            raise ConfigurationError(
                f"trainer.warmup_batches must be at least 1, got {warmup_batches}"
            )
        self._warmup_batches = warmup_batches
        self._eager_batches = 0
        self._eager_reason = self._why_eager()
        if self._eager_reason is not None:
            logger.info("elmo_graph_step: eager steps: %s", self._eager_reason)
        self._graph: Optional[StepGraph] = None
        self._stream: Optional[CaptureStream] = None
        self._captured_options: list[dict[str, Any]] = []
        # with a scheduler: each group's learning rate as the captured step reads it
        self._learning_rates: list[torch.Tensor] = []
        self._host_counters: list[torch.Tensor] = []
        self._other_shapes_logged = False
        self._replayed = False
        self._lagged_norm: Optional[float] = None
        self._readback = LaggedReadback()
        self._exact: dict[str, torch.Tensor] = {}  # the epoch's replayed losses, on the device
        self._lagged: dict[str, float] = {}  # what the trainer was handed for them
        self._callbacks.append(ReplayedBackward(self._serialization_dir))  # type: ignore[has-type]

    @property
    def captured(self) -> bool:
        """Whether the training step is captured now."""
        return self._graph is not None

    @property
    def eager_reason(self) -> Optional[str]:
        """Why every training step runs eagerly; None where the step is or will be captured."""
        return self._eager_reason

    def _why_eager(self) -> Optional[str]:
        reasons = [
            (self.cuda_device.type != "cuda", f"the device is {self.cuda_device}, not CUDA"),
            (self._distributed, "distributed training"),
            (self._num_gradient_accumulation_steps > 1, "num_gradient_accumulation_steps > 1"),
            (self._momentum_scheduler is not None, "a momentum scheduler"),
            (self._use_amp, "use_amp"),
            (
                any(group.get("lr_decay") for group in self.optimizer.param_groups),
                "the optimizer's lr_decay counts steps on the host",
            ),
        ]
        return next((why for applies, why in reasons if applies), None)

    def _train_epoch(self, epoch: int) -> dict[str, float]:
        """allennlp's epoch; its `loss` (and `reg_loss`) corrected from the lagged values the
        replayed batches handed it to their exact sum (one host read per epoch)."""
        self._exact, self._lagged, self._readback = {}, {}, LaggedReadback()
        metrics = super()._train_epoch(epoch)
        for key, exact in self._exact.items():
            if key in metrics:
                correction = float(exact) - self._lagged[key]
                metrics[key] += correction / self._batches_in_epoch_completed
        return metrics

    def batch_outputs(self, batch: dict[str, Any], for_training: bool) -> dict[str, torch.Tensor]:
        """Training on a captured graph: the step replayed, -> the model's scalar outputs, with
        `loss` (and `reg_loss`) the previous replay's, on the host. Otherwise allennlp's."""
        self._replayed = False
        graph = self._graph_for(batch) if for_training else None
        if graph is None:
            return super().batch_outputs(batch, for_training)
        if self._learning_rate_scheduler is not None:  # the rate allennlp would set first
            self._learning_rate_scheduler.step_batch(self._total_batches_completed + 1)
            groups = self.optimizer.param_groups if self._learning_rates else []
            for rate, group in zip(self._learning_rates, groups, strict=True):
                rate.fill_(group["lr"])
        # copies: the next replay overwrites the graph's outputs, and callbacks keep them
        outputs = {key: value.clone() for key, value in graph.replay(batch).items()}
        for counter in self._host_counters:
            counter += 1
        norm = outputs.pop("grad_norm", None)
        read = [key for key in READ_ON_HOST if key in outputs]
        values = [outputs[key].float() for key in read] + ([] if norm is None else [norm.float()])
        host = self._readback.read(torch.stack(values))
        for index, key in enumerate(read):
            self._exact[key] = self._exact.get(key, 0) + outputs[key].detach().double()
            self._lagged[key] = self._lagged.get(key, 0.0) + float(host[index])
            outputs[key] = host[index]
        self._lagged_norm = None if norm is None else float(host[-1])
        self._replayed = True
        return outputs

    def rescale_gradients(self) -> Optional[float]:
        return self._lagged_norm if self._replayed else super().rescale_gradients()

    def clip_gradient(self) -> None:
        if not self._replayed:
            super().clip_gradient()

    def _graph_for(self, batch: dict[str, Any]) -> Optional[StepGraph | WarmupStep]:
        """The captured step for this training batch (captured now if due), the last warm-up
        batch's step on the capture stream, or None: allennlp's eager step."""
        if self._eager_reason is not None:
            return None
        if self._eager_batches < self._warmup_batches:
            self._eager_batches += 1
            if self._eager_batches < self._warmup_batches:
                return None
            return WarmupStep(self._step, self._capture_stream())
        if self._graph is not None and self._captured_options != self._options():
            logger.info(
                "elmo_graph_step: the optimizer's options changed; capturing the step again"
            )
            self._graph = None
        if self._graph is None:
            self._capture(batch)
        if self._graph is not None and not self._graph.fits(batch):
            if not self._other_shapes_logged:
                logger.info(
                    "elmo_graph_step: batches of other shapes than the captured one run eagerly"
                )
                self._other_shapes_logged = True
            return None
        return self._graph

    def _capture(self, batch: dict[str, Any]) -> None:
        """The step captured on `batch`; a failure makes every later step eager (one log line).
        The capture runs the step's host-side code once, no kernel: the host's step counters it
        advanced are put back, and each replay advances them."""
        counters = host_step_counters(self.optimizer)
        before = [counter.clone() for counter in counters]
        self.optimizer.zero_grad(set_to_none=True)
        self._learning_rates = []
        if self._learning_rate_scheduler is not None:
            self._learning_rates = [
                torch.tensor(float(group["lr"]), device=self.cuda_device)
                for group in self.optimizer.param_groups
            ]
        try:
            with fused_groups_capturable(self.optimizer):
                self._graph = StepGraph(self._step, batch, self._capture_stream())
        except Exception as error:  # noqa: BLE001  (whatever cannot be captured runs eagerly)
            while error.__context__ is not None:  # the first error, not the failed capture's end
                error = error.__context__  # type: ignore[assignment]
            lines = str(error).splitlines() or [type(error).__name__]
            self._eager_reason = f"the step could not be captured: {lines[0]}"
            logger.warning("elmo_graph_step: eager steps: %s", self._eager_reason)
            self._capture_stream().reset()
            self.model.zero_grad(set_to_none=True)
            return
        finally:
            advanced = [c for c, b in zip(counters, before, strict=True) if not torch.equal(c, b)]
            for counter, value in zip(counters, before, strict=True):
                counter.copy_(value)
        self._host_counters = advanced
        self._captured_options = self._options()
        logger.info("elmo_graph_step: the training step is captured in a CUDA graph")

    def _capture_stream(self) -> CaptureStream:
        if self._stream is None:
            self._stream = CaptureStream(self.cuda_device)
        return self._stream

    def _options(self) -> list[dict[str, Any]]:
        return optimizer_options(self.optimizer, but=("lr",) if self._learning_rates else ())

    def _rates_on_the_device(self) -> contextlib.AbstractContextManager[None]:
        """Inside: each group's learning rate is its device tensor (with a scheduler)."""
        groups = self.optimizer.param_groups if self._learning_rates else []
        return options_set(groups, "lr", self._learning_rates)

    def _step(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """One training step as allennlp's trainer takes it, without its host reads: forward,
        backward, gradient norm and clipping, optimizer step, gradients released -> the model's
        scalar outputs and `grad_norm` (when `grad_norm` is set), on the device."""
        outputs = super().batch_outputs(batch, for_training=True)
        outputs["loss"].backward()
        parameters = [p for p in self.model.parameters() if p.grad is not None]
        gradients = [p.grad.detach() for p in parameters if p.grad is not None]
        scalars = {k: v.detach() for k, v in outputs.items() if torch.is_tensor(v) and v.dim() == 0}
        if not isinstance(self._grad_norm, bool):
            scalars["grad_norm"] = torch.nn.utils.clip_grad_norm_(parameters, self._grad_norm)
        elif self._grad_norm:
            norms = torch.stack([torch.linalg.vector_norm(gradient) for gradient in gradients])
            scalars["grad_norm"] = torch.linalg.vector_norm(norms)
        super().clip_gradient()
        with self._rates_on_the_device():
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return scalars


class ReplayedBackward(TrainerCallback):
    """`elmo_graph_step`'s own callback: takes the trainer's `loss.backward()` over for a batch
    whose step the graph has already run."""

    def on_backward(self, trainer, batch_outputs, backward_called, **kwargs) -> bool:
        return bool(getattr(trainer, "_replayed", False))
