"""ELMo for AllenNLP: importing this package registers every component."""
from elmo_plugin import data, modules, models, training  # noqa: F401
from elmo_plugin import commands, predictors  # noqa: F401
