"""ELMo for AllenNLP: importing this package registers every component.

Layers, each importing only from those before it:
data -> cpu -> modules -> training -> elmo_files -> models -> archives
-> token_embedders | predictors | commands
"""

from elmo_plugin import (
    commands,
    cpu,
    data,
    models,
    modules,
    predictors,
    token_embedders,
    training,
)

__all__ = [
    "commands",
    "cpu",
    "data",
    "models",
    "modules",
    "predictors",
    "token_embedders",
    "training",
]
