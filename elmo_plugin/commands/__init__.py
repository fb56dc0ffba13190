from elmo_plugin.commands import (
    elmo_continue,
    elmo_embed,
    elmo_export,
    elmo_plan,
    elmo_vocab,
    predict_output,
)

__all__ = [
    "elmo_continue",
    "elmo_embed",
    "elmo_export",
    "elmo_plan",
    "elmo_vocab",
    "predict_output",
]
