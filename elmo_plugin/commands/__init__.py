from elmo_plugin.commands import (  # noqa: F401
    elmo_continue,
    elmo_embed,
    elmo_export,  # noqa: F401
    elmo_plan,
    elmo_vocab,
)
