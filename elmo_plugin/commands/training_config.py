"""A training config with the user's `-o`, as `elmo-continue` and `elmo-plan` read it: one-line
errors naming what does not parse (the config or `-o`), an `-o` key the config lacks, and a
trainer key allennlp's trainer would ignore (a misspelt `trainer.num_epochs`)."""

import difflib
import inspect
from typing import Any

from allennlp.common.checks import ConfigurationError
from allennlp.common.params import Params, parse_overrides
from allennlp.training.gradient_descent_trainer import GradientDescentTrainer
from allennlp.training.trainer import Trainer

from elmo_plugin.commands.cli_errors import one_line


def trainer_keys() -> list[str]:
    """The keys of allennlp's `gradient_descent` trainer config."""
    names = inspect.signature(GradientDescentTrainer.from_partial_objects).parameters
    return [name for name in names if name != "kwargs"] + ["type", "run_sanity_checks"]


def unknown_trainer_keys(trainer: dict[str, Any]) -> list[str]:
    """Keys of a `gradient_descent` trainer config that allennlp's trainer takes as `**kwargs`
    and ignores (a misspelt `num_epochs`, say); none for another trainer type."""
    if trainer.get("type", Trainer.default_implementation) != "gradient_descent":
        return []
    return sorted(set(trainer) - set(trainer_keys()))


def user_overrides_dict(user_overrides: str) -> dict[str, Any]:
    """The user's -o (JSON or jsonnet) as a dict; a ConfigurationError when it does not parse."""
    try:
        return parse_overrides(user_overrides)
    except (RuntimeError, ValueError) as error:  # jsonnet's and JSON's syntax errors
        raise ConfigurationError(f"-o does not parse: {one_line(error)}") from None


def config_params(config: str, user_overrides: str) -> dict[str, Any]:
    """The config with the user's -o applied; an error when -o or the config does not parse, an
    -o key does not fit the config, or names a trainer key that allennlp's trainer would ignore."""
    user_overrides_dict(user_overrides)  # its syntax errors name -o, not the config
    try:
        params = Params.from_file(config, user_overrides).as_dict(quiet=True)
    except RuntimeError as error:  # jsonnet's syntax and runtime errors
        raise ConfigurationError(f"{config}: {one_line(error)}") from None
    except ValueError as error:  # allennlp's "overrides dict contains unused keys: [...]"
        raise ConfigurationError(f"-o does not fit {config}: {error}") from None
    unknown = unknown_trainer_keys(params.get("trainer", {}))
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, trainer_keys(), n=1)
        raise ConfigurationError(
            f"trainer.{key} is not a key of allennlp's trainer, which would "
            f"ignore it{f'; did you mean trainer.{close[0]}?' if close else ''}"
        )
    return params
