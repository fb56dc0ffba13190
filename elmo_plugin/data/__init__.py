from elmo_plugin.data import transformer_tokenizers
from elmo_plugin.data.conllu_tagging_reader import ConlluTaggingReader
from elmo_plugin.data.elmo_char_ids_indexer import ElmoCharIdsIndexer
from elmo_plugin.data.elmo_corpus_loader import ElmoCorpusLoader
from elmo_plugin.data.elmo_corpus_reader import ElmoCorpusReader
from elmo_plugin.data.elmo_manylangs_indexer import ElmoManyLangsIndexer
from elmo_plugin.data.elmo_manylangs_vocabulary import ElmoManyLangsVocabulary
from elmo_plugin.data.elmo_streams_loader import ElmoStreamsLoader
from elmo_plugin.data.elmo_tokens_vocabulary import ElmoTokensVocabulary
from elmo_plugin.data.unseen_labels_vocabulary import UnseenLabelsAsErrors

__all__ = [
    "ConlluTaggingReader",
    "ElmoCharIdsIndexer",
    "ElmoCorpusLoader",
    "ElmoCorpusReader",
    "ElmoManyLangsIndexer",
    "ElmoManyLangsVocabulary",
    "ElmoStreamsLoader",
    "ElmoTokensVocabulary",
    "UnseenLabelsAsErrors",
    "transformer_tokenizers",
]
