from elmo_plugin.commands import (
    archive_extraction,
    elmo_continue,
    elmo_embed,
    elmo_export,
    elmo_plan,
    elmo_vocab,
    evaluate_output,
    metrics_output,
    predict_output,
)

__all__ = [
    "archive_extraction",
    "elmo_continue",
    "elmo_embed",
    "elmo_export",
    "elmo_plan",
    "elmo_vocab",
    "evaluate_output",
    "metrics_output",
    "predict_output",
]
