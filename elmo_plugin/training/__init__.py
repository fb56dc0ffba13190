from elmo_plugin.training.elmo_adagrad import ElmoAdagradOptimizer
from elmo_plugin.training.elmo_checkpointer import ElmoCheckpointer
from elmo_plugin.training.elmo_corpus_resume import ElmoCorpusResumeCallback
from elmo_plugin.training.elmo_evaluator import ElmoEvaluator
from elmo_plugin.training.elmo_graph_step import ElmoGraphStepTrainer
from elmo_plugin.training.elmo_mix_weights import ElmoMixWeightsCallback
from elmo_plugin.training.elmo_peer_watchdog import PeerWatchdogCallback
from elmo_plugin.training.elmo_process_settings import ElmoProcessSettingsCallback
from elmo_plugin.training.elmo_tensorboard import ElmoTensorBoardCallback
from elmo_plugin.training.elmo_validation_checks import ValidationChecksCallback
from elmo_plugin.training.fused_adam import FusedAdamOptimizer
from elmo_plugin.training.process_settings import ProcessSettings
from elmo_plugin.training.reduce_on_plateau import ReduceOnPlateau
from elmo_plugin.training.tokens_per_second import TokensPerSecondCallback

__all__ = [
    "ElmoAdagradOptimizer",
    "ElmoCheckpointer",
    "ElmoCorpusResumeCallback",
    "ElmoEvaluator",
    "ElmoGraphStepTrainer",
    "ElmoMixWeightsCallback",
    "ElmoProcessSettingsCallback",
    "ElmoTensorBoardCallback",
    "FusedAdamOptimizer",
    "PeerWatchdogCallback",
    "ProcessSettings",
    "ReduceOnPlateau",
    "TokensPerSecondCallback",
    "ValidationChecksCallback",
]
