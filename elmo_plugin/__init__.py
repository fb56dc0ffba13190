"""ELMo for AllenNLP: importing this package registers every component.

Layers, each importing only from those before it:
data -> modules -> training -> elmo_files -> models -> archives -> token_embedders | predictors | commands
"""
from elmo_plugin import data, modules, training, models  # noqa: F401
from elmo_plugin import token_embedders, predictors, commands  # noqa: F401
