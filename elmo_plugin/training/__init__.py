from elmo_plugin.training.elmo_checkpointer import ElmoCheckpointer
from elmo_plugin.training.elmo_corpus_resume import ElmoCorpusResumeCallback
from elmo_plugin.training.elmo_mix_weights import ElmoMixWeightsCallback
from elmo_plugin.training.fused_adam import FusedAdamOptimizer
from elmo_plugin.training.tokens_per_second import TokensPerSecondCallback

__all__ = [
    "ElmoCheckpointer",
    "ElmoCorpusResumeCallback",
    "ElmoMixWeightsCallback",
    "FusedAdamOptimizer",
    "TokensPerSecondCallback",
]
