"""Subcommand `allennlp elmo-plan CONFIG [-o OVERRIDES]`: before a long run, what it will cost on
this machine. Builds the config's real data pipeline, vocabulary, model and trainer (as
`allennlp train` would, in a temporary folder), runs a few warm-up and timed training steps in a
child process, and prints tokens/s, peak memory, the size of one checkpoint, the projected time
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
from typing import Any, Optional

import torch
from allennlp.commands.subcommand import Subcommand
from allennlp.commands.train import TrainModel
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError

from elmo_plugin.commands.cli_errors import one_line, reports_errors

logger = logging.getLogger(__name__)

GIB = 1 << 30
# Bytes of state per parameter byte besides the parameter itself: its gradient, plus what the
# optimizer keeps (Adam: two moments; Adagrad: one accumulator; SGD with momentum: one).
OPTIMIZER_STATES = {"adam": 2, "adamw": 2, "fused_adam": 2, "huggingface_adamw": 2, "adagrad": 1}


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
    try:
        params = Params.from_file(config_file, overrides)
    except (RuntimeError, ValueError) as error:  # jsonnet and JSON syntax errors
        raise ConfigurationError(f"{config_file}: {one_line(error)}") from None
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
    """Builds the run as `allennlp train` would (one process, this machine's device) and times
    `steps` training steps after `warmup_steps`."""
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
        seconds, tokens, batches = timed_steps(trainer, warmup_steps, steps)
        model_bytes = state_bytes(model.state_dict())
        optimizer_bytes = state_bytes(trainer.optimizer.state_dict())
        try:
            epoch_batches: Optional[int] = len(trainer.data_loader)
        except TypeError:
            epoch_batches = None
    step_seconds = seconds / batches
    epoch_seconds = None if epoch_batches is None else step_seconds * epoch_batches
    return {
        "device": "cpu" if device < 0 else torch.cuda.get_device_name(device),
        "configured_device": configured_device,
        "processes_in_config": processes,
        "tokens_per_second": tokens / seconds if tokens else None,
        "seconds_per_batch": step_seconds,
        "peak_memory_bytes": peak_memory(device),
        "checkpoint_bytes": model_bytes + optimizer_bytes,
        "batches_per_epoch": epoch_batches,
        "batches_per_epoch_is_estimate": bool(
            getattr(trainer.data_loader, "length_is_estimate", False)
        ),
        "epoch_seconds": epoch_seconds,
        "num_epochs": num_epochs,
        "run_seconds": None if epoch_seconds is None else epoch_seconds * num_epochs,
        # the newest `keep` checkpoints (model + training state) and best.th
        "checkpoint_disk_bytes": keep * (model_bytes + optimizer_bytes) + model_bytes,
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


def timed_steps(trainer, warmup_steps: int, steps: int) -> tuple[float, float, int]:
    """(seconds, target tokens, batches) of `steps` training steps after `warmup_steps`, each a
    forward, backward and optimizer step on the config's own batches."""
    trainer.model.train()
    batches = iter(trainer.data_loader)
    seconds, tokens, done = 0.0, 0.0, 0
    for step in range(warmup_steps + steps):
        batch = next(batches, None)
        if batch is None:
            if done:
                break
            raise ConfigurationError("the training data has fewer batches than --warmup-steps")
        start = time.perf_counter()
        trainer.optimizer.zero_grad()
        output = trainer.batch_outputs(batch, for_training=True)
        output["loss"].backward()
        trainer.optimizer.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if step >= warmup_steps:
            seconds += time.perf_counter() - start
            tokens += float(output.get("batch_weight", torch.zeros(())))
            done += 1
    return seconds, tokens, done


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
    return [
        f"device: {plan['device']} (config: {plan['configured_device']}; "
        f"{plan['processes_in_config']} process(es) in the config, measured for one)",
        f"tokens/s: {'unknown' if tokens is None else f'{tokens:,.0f}'}; "
        f"{plan['seconds_per_batch']:.3f} s per batch",
        f"peak memory: {plan['peak_memory_bytes'] / GIB:.2f} GiB",
        f"one checkpoint: {plan['checkpoint_bytes'] / GIB:.3f} GiB; checkpoints on disk: "
        f"{plan['checkpoint_disk_bytes'] / GIB:.3f} GiB",
        f"batches per epoch: {plan['batches_per_epoch']}{estimate}",
        f"one epoch: {hours(plan['epoch_seconds'])}; "
        f"{plan['num_epochs']} epochs: {hours(plan['run_seconds'])}",
    ]
