"""What the optimizers that apply `TableRows` gradients share: finding them, and keeping them
and sparse gradients out of torch's own update of the other parameters."""

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin.modules.touched_rows import TableRows


class AppliesTableRows:
    """An optimizer that applies `TableRows` gradients to their tables (`_rows_step`); torch's
    own optimizers would update the rows as a parameter of their own and leave the table be."""

    def _rows_step(self, group: dict[str, Any], rows: TableRows) -> None:
        raise NotImplementedError


def refuse_unapplied_row_gradients(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Before the first batch: a `ConfigurationError` (one line) where `model` has `TableRows`
    (`elmo_bilm`'s `row_gradients: true`) and `optimizer` would not apply them."""
    if isinstance(optimizer, AppliesTableRows):
        return
    names = [name for name, p in model.named_parameters() if isinstance(p, TableRows)]
    if names:
        raise ConfigurationError(
            f"trainer.optimizer: {type(optimizer).__name__} would not update the softmax of "
            f"model.row_gradients: true ({names[0]}); use elmo_adagrad or fused_adam, or set "
            "model.row_gradients to false"
        )


def rows_with_gradients(optimizer: torch.optim.Optimizer) -> list[tuple[dict[str, Any], TableRows]]:
    """(parameter group, rows) for every `TableRows` of `optimizer` that has a gradient."""
    return [
        (group, rows)
        for group in optimizer.param_groups
        for rows in group["params"]
        if isinstance(rows, TableRows) and rows.grad is not None
    ]


@contextlib.contextmanager
def gradients_hidden(parameters: list[torch.Tensor]) -> Iterator[None]:
    """Inside: these parameters have no gradient (torch's update skips them); after: their
    gradients back."""
    gradients = [parameter.grad for parameter in parameters]
    for parameter in parameters:
        parameter.grad = None
    try:
        yield
    finally:
        for parameter, gradient in zip(parameters, gradients, strict=True):
            parameter.grad = gradient
