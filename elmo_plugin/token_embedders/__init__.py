from elmo_plugin.token_embedders.elmo_bilm_embedder import ElmoBiLmEmbedder

__all__ = [
    "ElmoBiLmEmbedder",
]
