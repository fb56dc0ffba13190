"""The keys of allennlp's `gradient_descent` trainer config, and the refusal of a key it would take
as `**kwargs` and ignore (a misspelt `trainer.num_epochs`)."""

import difflib
import inspect
from typing import Any

from allennlp.common.checks import ConfigurationError
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer


def trainer_keys() -> list[str]:
    """The keys of allennlp's `gradient_descent` trainer config."""
    names = inspect.signature(GradientDescentTrainer.from_partial_objects).parameters
    return [name for name in names if name != "kwargs"] + ["type", "run_sanity_checks"]


def refuse_unknown_trainer_keys(trainer: dict[str, Any]) -> None:
    """A ConfigurationError naming the first key of a `gradient_descent` trainer config that
    allennlp's trainer would ignore, with the key it resembles; nothing for another trainer."""
    if trainer.get("type", Trainer.default_implementation) != "gradient_descent":
        return
    keys = trainer_keys()
    unknown = sorted(set(trainer) - set(keys))
    if unknown:
        close = difflib.get_close_matches(unknown[0], keys, n=1)
        raise ConfigurationError(
            f"trainer.{unknown[0]} is not a key of allennlp's trainer, which would "
            f"ignore it{f'; did you mean trainer.{close[0]}?' if close else ''}"
        )
