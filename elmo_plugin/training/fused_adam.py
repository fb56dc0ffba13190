"""Optimizer `fused_adam`: allennlp's "adam" on torch's fused Adam kernel, plus lazy Adam for
sparse gradients."""

from collections.abc import Callable
from typing import Any, Optional, cast

import torch
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import Optimizer, make_parameter_groups
from torch.optim._functional import sparse_adam

from elmo_plugin.modules.touched_rows import TableRows
from elmo_plugin.training.row_gradients import (
    AppliesTableRows,
    gradients_hidden,
    rows_with_gradients,
)


@Optimizer.register("fused_adam")
class FusedAdamOptimizer(Optimizer, torch.optim.Adam, AppliesTableRows):
    """
    The same update as allennlp's "adam" (same arguments, same state, checkpoints and
    `allennlp train -r` alike), computed by `torch.optim.Adam(fused=True)`: one pass over each
    parameter instead of a dozen element-wise ops.

    A parameter whose gradient is sparse (the biLM's softmax with `sparse_embeddings: true`) gets
    torch's `SparseAdam` update instead ("lazy" Adam, as TensorFlow's LazyAdam). The rows a step
    touched update their moments and weights with the usual bias correction (by the parameter's
    step count); rows it did not touch keep weights and moments unchanged, where dense Adam would
    decay their moments and keep moving them. The rows of `elmo_bilm`'s softmax with
    `row_gradients: true` (`TableRows`) get the same lazy update, computed at fixed shapes on
    the device. Sparse gradients and rows need `weight_decay` 0 and no `amsgrad`. One
    optimizer, so learning-rate schedulers reach every kind of parameter.

    # Parameters

    model_parameters : `List[Tuple[str, torch.nn.Parameter]]`
        Given by allennlp: the model's named parameters.
    parameter_groups : `List[Tuple[List[str], Dict[str, Any]]]`, optional (default = `None`)
        allennlp's parameter groups: regexes of parameter names and their own options.
    lr : `float`, optional (default = `0.001`)
        The learning rate.
    betas : `Tuple[float, float]`, optional (default = `(0.9, 0.999)`)
        The decay rates of the first and second moment estimates.
    eps : `float`, optional (default = `1e-08`)
        Added to the denominator.
    weight_decay : `float`, optional (default = `0.0`)
        L2 penalty, as torch's `Adam` (0 for parameters with sparse gradients).
    amsgrad : `bool`, optional (default = `False`)
        The AMSGrad variant (not for parameters with sparse gradients).
    """

    def __init__(
        self,
        model_parameters: list[tuple[str, torch.nn.Parameter]],
        parameter_groups: Optional[list[tuple[list[str], dict[str, Any]]]] = None,
        lr: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-08,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(
            params=make_parameter_groups(model_parameters, parameter_groups),
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            fused=True,
        )

    @torch.no_grad()
    def step(  # type: ignore[override]  # one signature for torch's two overloads
        self, closure: Optional[Callable[[], float]] = None
    ) -> Optional[float]:
        """Fused Adam over the dense gradients, then lazy Adam over the sparse ones and the
        tables' rows."""
        sparse = [
            (group, parameter)
            for group in self.param_groups
            for parameter in group["params"]
            if parameter.grad is not None and parameter.grad.is_sparse
        ]
        rows = rows_with_gradients(self)
        # hidden from the fused kernel, which takes dense ones only
        with gradients_hidden([parameter for _, parameter in sparse + rows]):
            loss = super().step(closure)
        for group, parameter in sparse:
            self._sparse_step(group, parameter)
        for group, table_rows in rows:
            self._rows_step(group, table_rows)
        return loss

    def _lazy_state(self, group: dict[str, Any], parameter: torch.Tensor) -> dict[str, Any]:
        """The state of a parameter updated lazily, its step counted."""
        if group["weight_decay"] != 0 or group["amsgrad"]:
            raise ConfigurationError(
                "fused_adam: a parameter with sparse gradients (sparse_embeddings: true) needs "
                "weight_decay 0 and amsgrad false in its parameter group"
            )
        state = self.state[parameter]
        # a step count and dense moments; the count a float32 tensor, as fused Adam's (torch's
        # load_state_dict turns every "step" of a fused group into one)
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=parameter.device)
            state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        state["step"] += 1
        return state

    def _rows_step(self, group: dict[str, Any], rows: TableRows) -> None:
        """torch's `sparse_adam` update of the rows `rows` read, from their gradient, computed
        on the device (the step count too: no host read)."""
        state = self._lazy_state(group, rows.table)
        beta1, beta2 = group["betas"]
        gradient = cast(torch.Tensor, rows.grad)
        gradient = -gradient if group["maximize"] else gradient
        first = rows.first.unsqueeze(1).to(gradient.dtype)  # each row once
        exp_avg = state["exp_avg"].index_select(0, rows.ids)
        exp_avg_sq = state["exp_avg_sq"].index_select(0, rows.ids)
        exp_avg_update = (gradient - exp_avg).mul_(1 - beta1).mul_(first)
        exp_avg_sq_update = (gradient * gradient - exp_avg_sq).mul_(1 - beta2).mul_(first)
        state["exp_avg"].index_add_(0, rows.ids, exp_avg_update)
        state["exp_avg_sq"].index_add_(0, rows.ids, exp_avg_sq_update)
        denominator = (exp_avg_sq + exp_avg_sq_update).sqrt_().add_(group["eps"])
        step_size = group["lr"] * (1 - beta2 ** state["step"]).sqrt() / (1 - beta1 ** state["step"])
        update = (exp_avg + exp_avg_update).div_(denominator).mul_(first * step_size)
        rows.table.index_add_(0, rows.ids, update, alpha=-1.0)

    def _sparse_step(self, group: dict[str, Any], parameter: torch.nn.Parameter) -> None:
        state = self._lazy_state(group, parameter)
        beta1, beta2 = group["betas"]
        sparse_adam(
            [parameter],
            [parameter.grad],  # type: ignore[list-item]  # not None: sparse ones only come here
            [state["exp_avg"]],
            [state["exp_avg_sq"]],
            [int(state["step"])],
            eps=group["eps"],
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            maximize=group["maximize"],
        )
