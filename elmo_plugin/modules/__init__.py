from elmo_plugin.modules.elmo_char_cnn import ElmoCharCnn
from elmo_plugin.modules.elmo_lstm import ElmoLstmContextualizer
from elmo_plugin.modules.elmo_manylangs_cnn import ElmoManyLangsCnn
from elmo_plugin.modules.elmo_transformer import ElmoTransformerContextualizer

__all__ = [
    "ElmoCharCnn",
    "ElmoLstmContextualizer",
    "ElmoManyLangsCnn",
    "ElmoTransformerContextualizer",
]
