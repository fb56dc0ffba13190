"""Optimizer `elmo_adagrad`: allennlp's "adagrad", applying `TableRows` gradients to their
tables' rows (the sparse softmax at fixed shapes)."""

from collections.abc import Callable
from typing import Any, Optional, cast

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import AdagradOptimizer, Optimizer

from elmo_plugin.modules.touched_rows import TableRows
from elmo_plugin.training.row_gradients import (
    AppliesTableRows,
    gradients_hidden,
    rows_with_gradients,
)


@Optimizer.register("elmo_adagrad")
class ElmoAdagradOptimizer(AdagradOptimizer, AppliesTableRows):
    """
    allennlp's "adagrad" (`torch.optim.Adagrad`: the same arguments, state and checkpoints),
    plus the rows of `elmo_bilm`'s sparse softmax with `row_gradients: true`. A `TableRows`
    gradient updates its table's rows and accumulator (`sum`) as torch's sparse Adagrad
    updates them from the same gradient as a sparse tensor; the rows a step did not read keep
    their weights and accumulators. No sparse tensor, no shape that depends on the data.

    # Parameters

    model_parameters : `List[Tuple[str, torch.nn.Parameter]]`
        Given by allennlp: the model's named parameters.
    parameter_groups : `List[Tuple[List[str], Dict[str, Any]]]`, optional (default = `None`)
        allennlp's parameter groups: regexes of parameter names and their own options (a
        table's rows are updated with the options of its `TableRows`' group).
    lr : `float`, optional (default = `0.01`)
        The learning rate.
    lr_decay : `float`, optional (default = `0.0`)
        The learning rate's decay: lr / (1 + (step - 1) * lr_decay).
    weight_decay : `float`, optional (default = `0.0`)
        L2 penalty (0 for the groups of `TableRows`, as for sparse gradients).
    initial_accumulator_value : `float`, optional (default = `0.0`)
        Every accumulator's start.
    eps : `float`, optional (default = `1e-10`)
        Added to the denominator.
    """

    @torch.no_grad()
    def step(  # type: ignore[override]  # one signature for torch's two overloads
        self, closure: Optional[Callable[[], float]] = None
    ) -> Optional[float]:
        """torch's Adagrad over the other gradients, then the tables' rows."""
        rows = rows_with_gradients(self)
        with gradients_hidden([parameter for _, parameter in rows]):
            loss = super().step(closure)
        for group, parameter in rows:
            self._rows_step(group, parameter)
        return loss

    def _rows_step(self, group: dict[str, Any], rows: TableRows) -> None:
        if group["weight_decay"] != 0:
            raise ConfigurationError(
                "elmo_adagrad: the softmax's rows (row_gradients: true) need weight_decay 0 "
                "in their parameter group, as sparse gradients do"
            )
        state = self.state[rows.table]
        state["step"] += 1  # on the CPU, as torch's Adagrad keeps it
        learning_rate = group["lr"] / (1 + (float(state["step"]) - 1) * group["lr_decay"])
        gradient = cast(torch.Tensor, rows.grad)
        gradient = -gradient if group["maximize"] else gradient
        # A row's repeated slots carry no gradient: they add nothing.
        state["sum"].index_add_(0, rows.ids, gradient * gradient)
        deviation = state["sum"].index_select(0, rows.ids).sqrt_().add_(group["eps"])
        # the rate as a factor, not index_add_'s alpha: a tensor rate (elmo_graph_step with a
        # scheduler) stays on the device
        rows.table.index_add_(0, rows.ids, (gradient / deviation).mul_(-learning_rate))
