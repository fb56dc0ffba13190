from elmo_plugin.commands import elmo_export  # noqa: F401
from elmo_plugin.commands import elmo_embed, elmo_vocab  # noqa: F401
