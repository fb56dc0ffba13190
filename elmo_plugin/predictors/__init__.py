from elmo_plugin.predictors.elmo_embeddings import ElmoEmbeddingsPredictor
from elmo_plugin.predictors.elmo_lm_scorer import ElmoLmScorerPredictor
from elmo_plugin.predictors.whitespace_tagger import WhitespaceTaggerPredictor

__all__ = ["ElmoEmbeddingsPredictor", "ElmoLmScorerPredictor", "WhitespaceTaggerPredictor"]
