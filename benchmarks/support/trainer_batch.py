"""One training batch through a trainer's per-batch methods, in the order allennlp's
`GradientDescentTrainer._train_epoch` calls them, the learning-rate scheduler's step included
(without its progress bar, metrics and callbacks' `on_batch`)."""

from typing import Any

from allennlp.training.gradient_descent_trainer import GradientDescentTrainer


def train_batch(trainer: GradientDescentTrainer, batch: dict) -> tuple[dict[str, Any], Any]:
    """-> (the outputs the trainer handed on, the gradient norm it reported)."""
    trainer.optimizer.zero_grad()
    outputs = trainer.batch_outputs(batch, for_training=True)
    if not any(callback.on_backward(trainer, outputs, False) for callback in trainer._callbacks):
        outputs["loss"].backward()
    norm = trainer.rescale_gradients()
    trainer.clip_gradient()
    if trainer._learning_rate_scheduler is not None:
        trainer._learning_rate_scheduler.step_batch(trainer._total_batches_completed + 1)
    trainer.optimizer.step()
    trainer._total_batches_completed += 1
    return outputs, norm


def handed_on(trainer: GradientDescentTrainer, batch: dict) -> list:
    """[loss, gradient norm] that a trainer hands on (progress bar, callbacks) for `batch`."""
    outputs, norm = train_batch(trainer, batch)
    return [outputs["loss"].item(), norm]
