from elmo_plugin.commands import elmo_embed, elmo_export, elmo_vocab

__all__ = ["elmo_embed", "elmo_export", "elmo_vocab"]
