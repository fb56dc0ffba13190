"""The keys of allennlp's `gradient_descent` trainer config (and `elmo_graph_step`'s), and the
refusal of a key the trainer would take as `**kwargs` and ignore (a misspelt
`trainer.num_epochs`)."""

import difflib
import inspect
from typing import Any

from allennlp.common.checks import ConfigurationError
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmo_plugin.training.elmo_graph_step import ElmoGraphStepTrainer


def own_keys(trainer: type) -> list[str]:
    """The keyword-only parameters a trainer adds to `gradient_descent`'s."""
    parameters = inspect.signature(trainer).parameters.values()
    return [p.name for p in parameters if p.kind == inspect.Parameter.KEYWORD_ONLY]


# The trainers that take `gradient_descent`'s keys, and the keys each adds.
ADDED_KEYS = {"gradient_descent": [], "elmo_graph_step": own_keys(ElmoGraphStepTrainer)}


def trainer_keys() -> list[str]:
    """The keys of allennlp's `gradient_descent` trainer config."""
    names = inspect.signature(GradientDescentTrainer.from_partial_objects).parameters
    return [name for name in names if name != "kwargs"] + ["type", "run_sanity_checks"]


def refuse_unknown_trainer_keys(trainer: dict[str, Any]) -> None:
    """A ConfigurationError naming the first key of a `gradient_descent` or `elmo_graph_step`
    trainer config that the trainer would ignore, with the key it resembles; nothing for another
    trainer."""
    added = ADDED_KEYS.get(trainer.get("type", Trainer.default_implementation))
    if added is None:
        return
    keys = trainer_keys() + added
    unknown = sorted(set(trainer) - set(keys))
    if unknown:
        close = difflib.get_close_matches(unknown[0], keys, n=1)
        raise ConfigurationError(
            f"trainer.{unknown[0]} is not a key of allennlp's trainer, which would "
            f"ignore it{f'; did you mean trainer.{close[0]}?' if close else ''}"
        )
