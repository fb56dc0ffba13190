from elmo_plugin.models.elmo_bilm import ElmoLanguageModel

__all__ = [
    "ElmoLanguageModel",
]
