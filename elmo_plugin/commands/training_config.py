"""A training config with the user's `-o`, as `elmo-continue` and `elmo-plan` read it: one-line
errors naming what does not parse (the config or `-o`), an `-o` key the config lacks, and a
trainer key allennlp's trainer would ignore (a misspelt `trainer.num_epochs`)."""

import json
import os
from typing import Any

from allennlp.common.checks import ConfigurationError
from allennlp.common.params import Params, parse_overrides

from elmo_plugin.commands.cli_errors import one_line
from elmo_plugin.training.trainer_keys import refuse_unknown_trainer_keys


def user_overrides_dict(user_overrides: str) -> dict[str, Any]:
    """The user's -o (JSON or jsonnet) as a dict; a ConfigurationError when it does not parse."""
    try:
        overrides = parse_overrides(user_overrides)
    except (RuntimeError, ValueError) as error:  # jsonnet's and JSON's syntax errors
        raise ConfigurationError(f"-o does not parse: {one_line(error)}") from None
    if not isinstance(overrides, dict):
        raise ConfigurationError(f"-o is {json.dumps(overrides)}: it must be a JSON object of keys")
    return overrides


def config_params(config: str, user_overrides: str) -> dict[str, Any]:
    """The config with the user's -o applied; an error when -o or the config does not parse, an
    -o key does not fit the config, or names a trainer key that allennlp's trainer would ignore."""
    user_overrides_dict(user_overrides)  # its syntax errors name -o, not the config
    if not os.path.isfile(config):
        raise ConfigurationError(f"config {config}: no such file")
    try:
        params = Params.from_file(config, user_overrides).as_dict(quiet=True)
    except RuntimeError as error:  # jsonnet's syntax and runtime errors
        raise ConfigurationError(f"{config}: {one_line(error)}") from None
    except ValueError as error:  # allennlp's "overrides dict contains unused keys: [...]"
        raise ConfigurationError(f"-o does not fit {config}: {error}") from None
    refuse_replaced_sections(Params.from_file(config).as_dict(quiet=True), params)
    refuse_unknown_trainer_keys(params.get("trainer") or {})
    return params


def refuse_replaced_sections(config: dict[str, Any], params: dict[str, Any], at: str = "") -> None:
    """A ConfigurationError naming the first key where the config has an object and `params`
    (the config with -o) has something else than an object or null (`-o '{"trainer": 5}'`)."""
    for key, section in config.items():
        if isinstance(section, dict) and params.get(key) is not None:
            if not isinstance(params[key], dict):
                raise ConfigurationError(
                    f"-o makes {at}{key} {json.dumps(params[key])}, where the config has an "
                    "object of keys"
                )
            refuse_replaced_sections(section, params[key], f"{at}{key}.")
