"""Trainer callback `elmo_corpus_resume`: saves the `elmo_corpus` (or `elmo_streams`) data
loader's position in every checkpoint and, on `allennlp train -r`, starts the loader there, so
the resumed run trains exactly the batches the killed run had not, reading nothing before them."""

from typing import Any, Optional

from allennlp.common.checks import ConfigurationError
from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.data.corpus_data_loader import CorpusDataLoader


@TrainerCallback.register("elmo_corpus_resume")
class ElmoCorpusResumeCallback(TrainerCallback):
    """
    Needs the `elmo_corpus` or `elmo_streams` data loader. The position is the same in every
    distributed process (each has the same number of batches per chunk), so the primary's
    checkpoint serves all.

    # Parameters

    serialization_dir : `str`
        Given by allennlp: the run's folder.
    """

    def __init__(self, serialization_dir: str) -> None:
        super().__init__(serialization_dir)
        self._restored: Optional[dict[str, Any]] = None

    def state_dict(self) -> dict[str, Any]:
        loader = self.trainer.data_loader if self.trainer else None
        return {"data_loader": loader.state_dict()} if isinstance(loader, CorpusDataLoader) else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = state_dict.get("data_loader")

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        if not isinstance(trainer.data_loader, CorpusDataLoader):
            raise ConfigurationError(
                "callback elmo_corpus_resume: needs data_loader type elmo_corpus or elmo_streams"
            )
        if self._restored is None:
            return
        epochs, batches = (
            trainer._start_after_epochs_completed,
            trainer._start_after_batches_in_epoch_completed,
        )
        saved = (self._restored["epoch"], self._restored["batches"])
        # The loader counts batches, the trainer groups of num_gradient_accumulation_steps.
        if saved[0] != epochs or (batches == 0) != (saved[1] == 0):
            raise ConfigurationError(
                f"callback elmo_corpus_resume: the checkpoint's trainer is at epoch {epochs} "
                f"batch {batches} but its data loader at epoch {saved[0]} batch {saved[1]}"
            )
        trainer.data_loader.resume_from(self._restored)
