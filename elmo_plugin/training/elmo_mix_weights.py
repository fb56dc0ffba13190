"""TrainerCallback `elmo_mix_weights`: the ELMo layer-mix weights softmax(s) and gamma over time,
to TensorBoard."""

import logging
from typing import Any, Optional

import torch
from allennlp.common.util import is_global_primary
from allennlp.modules.scalar_mix import ScalarMix
from allennlp.training.callbacks.callback import TrainerCallback

from elmo_plugin.training.scalar_events import ScalarEvents

logger = logging.getLogger(__name__)


def mix_weights(mix: ScalarMix) -> tuple[list[float], float]:
    """(softmax(s)_j for every biLM layer j (layer 0 = character CNN), gamma), as the mix uses
    them."""
    with torch.no_grad():
        weights = torch.softmax(
            torch.cat([parameter.float() for parameter in mix.scalar_parameters]), dim=0
        )
        return weights.tolist(), mix.gamma.float().item()


@TrainerCallback.register("elmo_mix_weights")
class ElmoMixWeightsCallback(TrainerCallback):
    """
    For every ELMo layer mix anywhere in the model (allennlp's `ScalarMix`, as in our
    `elmo_bilm_embedder` and allennlp's `elmo_token_embedder`; P is the path of the module that
    holds it, e.g. `text_field_embedder.token_embedder_elmo`), writes `elmo_mix/P/weight_j` =
    softmax(s)_j (j = 0 the character CNN, 1.. the contextualizer layers; they sum to 1) and
    `elmo_mix/P/gamma` to `SERIALIZATION_DIR/log/train`. They are written every `summary_interval`
    batches and after the last batch of each epoch, at the step allennlp's `tensorboard` callback
    uses for its batch scalars (batches completed + 1). A few scalars copied to the host per point.
    A model without a layer mix: one log line, nothing written.

    # Parameters

    serialization_dir : `str`
        Given by allennlp: the run's folder.
    summary_interval : `int`, optional (default = `100`)
        Batches between two points.
    """

    def __init__(self, serialization_dir: str, summary_interval: int = 100) -> None:
        super().__init__(serialization_dir)
        self._summary_interval = summary_interval
        self._mixes: list[tuple[str, ScalarMix]] = []
        self._last_step: Optional[int] = None
        self._events = ScalarEvents(serialization_dir, "train", ".elmo_mix_weights")

    def on_start(self, trainer, is_primary: bool = True, **kwargs) -> None:
        super().on_start(trainer, is_primary=is_primary, **kwargs)
        self._mixes = [
            (name.rpartition(".")[0], module)
            for name, module in trainer.model.named_modules()
            if isinstance(module, ScalarMix)
        ]
        if not self._mixes and is_global_primary():
            logger.info("elmo_mix_weights: the model has no ELMo layer mix; nothing to log")

    def _log(self, trainer) -> None:
        step = trainer._total_batches_completed + 1
        if not self._mixes or step == self._last_step:
            return
        for name, mix in self._mixes:
            weights, gamma = mix_weights(mix)
            for layer, weight in enumerate(weights):
                self._events.add_scalar(f"elmo_mix/{name}/weight_{layer}", weight, step)
            self._events.add_scalar(f"elmo_mix/{name}/gamma", gamma, step)
        self._last_step = step

    def on_batch(
        self,
        trainer,
        batch_inputs: list[Any],
        batch_outputs: list[dict[str, Any]],
        batch_metrics: dict[str, Any],
        epoch: int,
        batch_number: int,
        is_training: bool,
        is_primary: bool = True,
        batch_grad_norm: Optional[float] = None,
        **kwargs,
    ) -> None:
        if (
            is_training
            and is_global_primary()
            and trainer._total_batches_completed % self._summary_interval == 0
        ):
            self._log(trainer)

    def on_epoch(
        self, trainer, metrics: dict[str, Any], epoch: int, is_primary: bool = True, **kwargs
    ) -> None:
        if is_global_primary():
            self._log(trainer)

    def on_end(
        self,
        trainer,
        metrics: Optional[dict[str, Any]] = None,
        epoch: Optional[int] = None,
        is_primary: bool = True,
        **kwargs,
    ) -> None:
        self._events.close()
