"""Subcommand `allennlp elmo-plan CONFIG [-o OVERRIDES]`: before a long run, what it will cost on
this machine. Builds the config's real data pipeline, vocabulary, model and trainer (as
`allennlp train` would, in a temporary folder) and runs a few warm-up and timed training steps in a
child process. It prints tokens/s, peak memory, the size of one checkpoint, the projected time
of an epoch and of the run, and the disk its checkpoints will take. Writes nothing anywhere else.
"""

import argparse
import json
import logging
import multiprocessing
import os
import resource
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import torch
from allennlp.commands.subcommand import Subcommand
from allennlp.commands.train import TrainModel
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.cli_errors import one_line, reports_errors
from elmo_plugin.commands.training_config import config_params
from elmo_plugin.data.corpus_data_loader import CorpusDataLoader
from elmo_plugin.training.elmo_validation_checks import ValidationChecksCallback, loader_length
from elmo_plugin.training.row_gradients import refuse_unapplied_row_gradients
from elmo_plugin.training.sparse_gradient_sync import refuse_unclippable_sparse_gradients

logger = logging.getLogger(__name__)

GIB = 1 << 30
# Bytes of state per parameter byte besides the parameter itself: its gradient, plus what the
# optimizer keeps (Adam: two moments; Adagrad: one accumulator; SGD with momentum: one).
OPTIMIZER_STATES = {
    "adam": 2,
    "adamw": 2,
    "fused_adam": 2,
    "huggingface_adamw": 2,
    "adagrad": 1,
    "elmo_adagrad": 1,
}


@Subcommand.register("elmo-plan")
class ElmoPlan(Subcommand):
    def add_subparser(self, parser: argparse._SubParsersAction) -> argparse.ArgumentParser:
        description = (
            "Measure a training config on this machine before running it: tokens/s, peak "
            "memory, checkpoint size, the projected time of an epoch and of the run, and the "
            "disk its checkpoints need. Writes nothing outside a temporary folder."
        )
        subparser = parser.add_parser(
            self.name, description=description, help="Plan a training run."
        )
        subparser.add_argument("config_file", type=str, help="the training config (jsonnet)")
        subparser.add_argument(
            "-o", "--overrides", type=str, default="", help="a JSON object of overrides, as train's"
        )
        subparser.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
        subparser.add_argument("--steps", type=int, default=5, help="timed training steps")
        subparser.set_defaults(func=_plan_from_args)
        return subparser


@reports_errors("elmo-plan")
def _plan_from_args(args: argparse.Namespace) -> None:
    plan = plan_config(args.config_file, args.overrides, args.warmup_steps, args.steps)
    for line in plan_lines(plan):
        print(line)
    print(json.dumps(plan))


def plan_config(config_file: str, overrides: str, warmup_steps: int, steps: int) -> dict[str, Any]:
    """The plan's figures (see `measure`), measured in a child process: a step that runs out of
    memory and kills it is reported as a one-line error."""
    if warmup_steps < 0 or steps < 1:
        raise ConfigurationError(
            f"--warmup-steps must be >= 0 and --steps >= 1, got {warmup_steps}, {steps}"
        )
    params = Params(config_params(config_file, overrides))
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_measure_in_child, args=(params, warmup_steps, steps, send))
    child.start()
    send.close()
    try:
        result = receive.recv()
    except EOFError:
        child.join()
        cause = (
            f"killed by {signal.Signals(-child.exitcode).name}"
            if child.exitcode is not None and child.exitcode < 0
            else f"exit status {child.exitcode}"
        )
        raise ConfigurationError(
            f"{config_file}: the training steps died ({cause}; a kill here is usually the "
            "machine running out of memory): the config does not fit this machine"
        ) from None
    child.join()
    if "error" in result:
        raise ConfigurationError(f"{config_file}: {result['error']}")
    return result


def _measure_in_child(params: Params, warmup_steps: int, steps: int, send) -> None:
    try:
        send.send(measure(params, warmup_steps, steps))
    except Exception as error:  # the process boundary: any failure to build or step, one line
        send.send({"error": one_line(error)})
    finally:
        send.close()
        os._exit(0)  # no atexit handlers of the parent's in the forked child


def measure(params: Params, warmup_steps: int, steps: int) -> dict[str, Any]:
    """Builds the run as `allennlp train` would (one process, this machine's device), times
    `steps` training steps after `warmup_steps`, validation batches and one checkpoint save, and
    projects an epoch from them (`EpochPlan`)."""
    params = params.duplicate()
    processes = len(params.pop("distributed", {}).get("cuda_devices", [0])) or 1
    params.pop("evaluation", None)  # `allennlp evaluate`'s, which `allennlp train` drops too
    trainer_params = params.get("trainer")
    configured_device = trainer_params.get("cuda_device", None)
    device = 0 if torch.cuda.is_available() else -1
    trainer_params["cuda_device"] = device
    num_epochs = int(trainer_params.get("num_epochs", 20))
    optimizer_type = trainer_params.get("optimizer", {}).get("type", "adam")
    keep = trainer_params.get("checkpointer", {}).get("keep_most_recent_by_count", 2)
    with tempfile.TemporaryDirectory(prefix="elmo-plan-") as folder:
        run = TrainModel.from_params(params=params, serialization_dir=folder, local_rank=0)
        trainer: Any = run.trainer  # a GradientDescentTrainer (its data loader, optimizer)
        model = trainer.model
        fits_or_raise(model, optimizer_type, device)
        refuse_unclippable_sparse_gradients(model, trainer._grad_norm)  # as `allennlp train`
        refuse_unapplied_row_gradients(model, trainer.optimizer)
        start = time.perf_counter()
        epoch_batches = loader_length(trainer.data_loader)
        length_seconds = time.perf_counter() - start  # an estimate reads a sample of the corpus
        train = timed_steps(trainer, warmup_steps, steps)
        validation = timed_validation(trainer, steps)
        checkpoint_seconds = timed_checkpoint(trainer)
        model_bytes = state_bytes(model.state_dict())
        optimizer_bytes = state_bytes(trainer.optimizer.state_dict())
        plan = EpochPlan(
            batches=epoch_batches,
            step_seconds=train.seconds / train.batches,
            warm_up_seconds=train.warm_up_excess + length_seconds,
            validation_batches=validation.batches,
            validation_seconds=validation.seconds_per_batch,
            check_batches=[
                checks_of(callback, validation.batches, epoch_batches)
                for callback in trainer._callbacks
                if isinstance(callback, ValidationChecksCallback)
            ],
            checkpoints=checkpoints_per_epoch(trainer._checkpointer, epoch_batches),
            checkpoint_seconds=checkpoint_seconds,
        )
    parts = plan.parts()
    epoch_seconds = None if parts is None else sum(parts.values())
    return {
        "device": "cpu" if device < 0 else torch.cuda.get_device_name(device),
        "configured_device": configured_device,
        "processes_in_config": processes,
        "tokens_per_second": train.tokens / train.seconds if train.tokens else None,
        "seconds_per_batch": plan.step_seconds,
        "validation_seconds_per_batch": validation.seconds_per_batch,
        "peak_memory_bytes": peak_memory(device),
        "checkpoint_bytes": model_bytes + optimizer_bytes,
        "checkpoint_seconds": checkpoint_seconds,
        "batches_per_epoch": epoch_batches,
        "batches_per_epoch_is_estimate": isinstance(trainer.data_loader, CorpusDataLoader)
        and trainer.data_loader.length_is_estimate,
        "validation_batches": validation.batches,
        "epoch_parts": parts,
        "epoch_seconds": epoch_seconds,
        "num_epochs": num_epochs,
        "run_seconds": None
        if epoch_seconds is None
        else epoch_seconds + (num_epochs - 1) * (epoch_seconds - plan.warm_up_seconds),
        # the newest `keep` checkpoints (model + training state) and best.th
        "checkpoint_disk_bytes": keep * (model_bytes + optimizer_bytes) + model_bytes,
    }


@dataclass
class EpochPlan:
    """What one epoch of `allennlp train` spends, from the measured parts. The training batches
    (each read, forward, backward, gradient rescaling, optimizer step), the first epoch's one-off
    costs (the first steps' warm-up beyond a step's time, the loader's length estimate), the
    validation checks inside the epoch, the validation at its end, and its checkpoints. Counts
    are None where a data loader has no length."""

    batches: Optional[int]
    step_seconds: float
    warm_up_seconds: float
    validation_batches: Optional[int]  # None: no validation data, or its loader has no length
    validation_seconds: Optional[float]
    check_batches: list[Optional[int]]  # validation batches the checks read per epoch
    checkpoints: Optional[int]
    checkpoint_seconds: float

    def parts(self) -> Optional[dict[str, float]]:
        """Seconds of each part of the first epoch; None when the epoch's length is unknown."""
        if self.batches is None or self.checkpoints is None:
            return None
        validation = self.validation_seconds or 0.0
        return {
            "training": self.batches * self.step_seconds,
            "warm_up": self.warm_up_seconds,
            "validation_checks": sum(count or 0 for count in self.check_batches) * validation,
            "validation": (self.validation_batches or 0) * validation,
            "checkpoints": self.checkpoints * self.checkpoint_seconds,
        }


def fits_or_raise(model: torch.nn.Module, optimizer_type: str, device: int) -> None:
    """An error naming what does not fit when the parameters, their gradients and the
    optimizer's state alone exceed the device's free memory (activations come on top)."""
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    needed = parameter_bytes * (2 + OPTIMIZER_STATES.get(optimizer_type, 0))
    available = available_memory(device)
    if needed > available:
        raise ConfigurationError(
            f"the model's parameters ({parameter_bytes / GIB:.1f} GiB), their gradients and the "
            f"{optimizer_type} optimizer's state need {needed / GIB:.1f} GiB before any "
            f"activation, but this machine's {'GPU' if device >= 0 else 'memory'} has "
            f"{available / GIB:.1f} GiB free"
        )


def available_memory(device: int) -> int:
    if device >= 0:
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo", encoding="utf-8") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


class StepTimes(NamedTuple):
    seconds: float  # of the timed steps
    tokens: float  # target tokens of the timed steps
    batches: int  # timed steps
    warm_up_excess: float  # seconds the warm-up steps took beyond as many timed steps


def timed_steps(trainer, warmup_steps: int, steps: int) -> StepTimes:
    """`steps` training steps after `warmup_steps`, each as allennlp's trainer takes it: the
    batch read from the data loader, forward, backward, gradient rescaling and clipping, the
    optimizer step."""
    trainer.model.train()
    batches = iter(trainer.data_loader)
    seconds, tokens, done, warm_up = 0.0, 0.0, 0, 0.0
    for step in range(warmup_steps + steps):
        start = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            if done:
                break
            raise ConfigurationError("the training data has fewer batches than --warmup-steps")
        trainer.optimizer.zero_grad()
        output = trainer.batch_outputs(batch, for_training=True)
        output["loss"].backward()
        trainer.rescale_gradients()
        trainer.clip_gradient()
        trainer.optimizer.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if step < warmup_steps:
            warm_up += time.perf_counter() - start
        else:
            seconds += time.perf_counter() - start
            tokens += float(output.get("batch_weight", torch.zeros(())))
            done += 1
    return StepTimes(seconds, tokens, done, max(warm_up - warmup_steps * seconds / done, 0.0))


class ValidationTimes(NamedTuple):
    batches: Optional[int]  # the validation loader's length; None: no validation or no length
    seconds_per_batch: Optional[float]


def timed_validation(trainer, steps: int) -> ValidationTimes:
    """Seconds per validation batch (read, forward in eval mode without gradients), as allennlp's
    validation and the checks take them: over up to `steps` batches after an untimed first one
    (the first alone where there is only one)."""
    loader = trainer._validation_data_loader
    if loader is None:
        return ValidationTimes(None, None)
    trainer.model.eval()
    seconds: list[float] = []
    batches = iter(loader)
    with torch.no_grad():
        for _ in range(steps + 1):
            start = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                break
            trainer.batch_outputs(batch, for_training=False)
            seconds.append(time.perf_counter() - start)
    trainer.model.train()
    timed = seconds[1:] or seconds
    return ValidationTimes(loader_length(loader), sum(timed) / len(timed) if timed else None)


def timed_checkpoint(trainer) -> float:
    """Seconds of one checkpoint save (model and training state) into the plan's folder."""
    if trainer._checkpointer is None:
        return 0.0
    start = time.perf_counter()
    trainer._checkpointer.save_checkpoint(trainer)
    return time.perf_counter() - start


def checks_of(
    callback: ValidationChecksCallback,
    validation_batches: Optional[int],
    epoch_batches: Optional[int],
) -> Optional[int]:
    """Validation batches the `elmo_validation_checks` callback reads per epoch (its checks
    times the batches of its sample); None where a length is unknown."""
    per_check = callback.max_batches if callback.max_batches is not None else validation_batches
    if validation_batches is not None and per_check is not None:
        per_check = min(per_check, validation_batches)
    if per_check is None or epoch_batches is None:
        return None
    return epoch_batches // callback.every_num_batches * per_check


def checkpoints_per_epoch(checkpointer, epoch_batches: Optional[int]) -> Optional[int]:
    """Checkpoints allennlp's checkpointer saves in an epoch: every `save_every_num_batches`
    and at the epoch's end (`save_completed_epochs`)."""
    if checkpointer is None:
        return 0
    every = checkpointer._save_every_num_batches
    if every is None:
        return int(checkpointer._save_completed_epochs)
    if epoch_batches is None:
        return None
    return epoch_batches // every + int(checkpointer._save_completed_epochs)


def state_bytes(state: Any) -> int:
    """Bytes of every tensor in a (nested) state dict."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(value) for value in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(value) for value in state)
    return 0


def peak_memory(device: int) -> int:
    if device >= 0:
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan for a person, one figure a line."""

    def hours(seconds: Optional[float]) -> str:
        return (
            "unknown (the data loader has no length)"
            if seconds is None
            else f"{seconds / 3600:.2f} h"
        )

    estimate = " (estimated)" if plan["batches_per_epoch_is_estimate"] else ""
    tokens = plan["tokens_per_second"]
    parts = plan["epoch_parts"]
    validation = plan["validation_seconds_per_batch"]
    lines = [
        f"device: {plan['device']} (config: {plan['configured_device']}; "
        f"{plan['processes_in_config']} process(es) in the config, measured for one)",
        f"tokens/s: {'unknown' if tokens is None else f'{tokens:,.0f}'}; "
        f"{plan['seconds_per_batch']:.3f} s per batch"
        + ("" if validation is None else f", {validation:.3f} s per validation batch"),
        f"peak memory: {plan['peak_memory_bytes'] / GIB:.2f} GiB",
        f"one checkpoint: {plan['checkpoint_bytes'] / GIB:.3f} GiB, saved in "
        f"{plan['checkpoint_seconds']:.1f} s; checkpoints on disk: "
        f"{plan['checkpoint_disk_bytes'] / GIB:.3f} GiB",
        f"batches per epoch: {plan['batches_per_epoch']}{estimate}",
        f"one epoch: {hours(plan['epoch_seconds'])}; "
        f"{plan['num_epochs']} epochs: {hours(plan['run_seconds'])}",
    ]
    if parts is not None:
        lines.append(
            "the first epoch: "
            + ", ".join(
                f"{name.replace('_', ' ')} {seconds:,.0f} s" for name, seconds in parts.items()
            )
        )
    if validation is not None and plan["validation_batches"] is None:
        lines.append("validation not counted: its data loader has no length")
    return lines
