"""Sparse embedding gradients averaged over DDP processes by gathering the touched rows, and
refused before training where this torch cannot clip them."""

from typing import Union

import torch
import torch.distributed as dist
from allennlp.common.checks import ConfigurationError
from torch.nn.parallel import DistributedDataParallel

from elmo_plugin.modules.touched_rows import TableRows


def sparse_parameter_names(module: torch.nn.Module) -> list[str]:
    """Names (as `module.named_parameters()` gives them) of every `Embedding(sparse=True)`
    weight."""
    return [
        f"{name}.weight" if name else "weight"
        for name, child in module.named_modules()
        if isinstance(child, torch.nn.Embedding) and child.sparse
    ]


def rows_parameter_names(module: torch.nn.Module) -> list[str]:
    """Names of every `TableRows` parameter (the rows of a table a step read)."""
    return [name for name, p in module.named_parameters() if isinstance(p, TableRows)]


def sparse_gradient_names(module: torch.nn.Module) -> list[str]:
    """The sparse embeddings whose gradients are sparse tensors: those not read through
    `TableRows` (whose gradients are the rows')."""
    tables = {id(p.table) for p in module.parameters() if isinstance(p, TableRows)}
    parameters = dict(module.named_parameters())
    return [name for name in sparse_parameter_names(module) if id(parameters[name]) not in tables]


def torch_norms_sparse_gradients() -> bool:
    """Whether this torch's `clip_grad_norm_` (allennlp's `trainer.grad_norm`) takes sparse
    gradients: torch 2.14 and later have `linalg.vector_norm` for sparse tensors; earlier ones
    raise NotImplementedError."""
    probe = torch.sparse_coo_tensor(
        torch.zeros(1, 1, dtype=torch.long), torch.ones(1), (1,), check_invariants=False
    )
    try:
        torch.linalg.vector_norm(probe)
    except NotImplementedError:
        return False
    return True


def unclippable_sparse_parameters(
    module: torch.nn.Module, grad_norm: Union[float, bool, None]
) -> list[str]:
    """The names of `module`'s sparse embeddings that clipping to `grad_norm` (allennlp's
    `trainer.grad_norm`: a number clips, false or None does nothing) would fail on inside this
    torch; empty where it clips them or does not clip."""
    clips = grad_norm is not None and not isinstance(grad_norm, bool)
    names = sparse_gradient_names(module) if clips else []
    return names if names and not torch_norms_sparse_gradients() else []


def refuse_unclippable_sparse_gradients(
    module: torch.nn.Module, grad_norm: Union[float, bool]
) -> None:
    """Before the first batch: a `ConfigurationError` (one line) where allennlp's gradient
    clipping (`trainer.grad_norm`) would fail on `module`'s sparse embeddings inside torch."""
    names = unclippable_sparse_parameters(module, grad_norm)
    if names:
        raise ConfigurationError(
            f"trainer.grad_norm: torch {torch.__version__} cannot clip the sparse gradients of "
            f"{names[0]} (model.sparse_embeddings: true); torch 2.14 or later can: install "
            "it, or set model.sparse_embeddings or trainer.grad_norm to false"
        )


def is_multiprocess() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_gather_padded(tensor: torch.Tensor) -> torch.Tensor:
    """Every process's `tensor` (sizes may differ along dim 0), concatenated in rank order. Pads
    to the largest size: NCCL's all_gather needs equal sizes."""
    size = torch.tensor([tensor.size(0)], device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = int(max(sizes))
    padded = tensor.new_zeros((longest, *tensor.shape[1:]))
    padded[: tensor.size(0)] = tensor
    gathered = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(gathered, padded)
    return torch.cat([part[: int(n)] for part, n in zip(gathered, sizes, strict=True)])


def average_sparse_gradient(gradient: torch.Tensor) -> torch.Tensor:
    """A sparse (rows, ...) gradient -> the mean of all processes' ones, coalesced (duplicate rows
    summed), as DDP averages dense gradients. Dense gradients and single processes pass through."""
    if not gradient.is_sparse or not is_multiprocess():
        return gradient
    gradient = gradient.coalesce()
    rows = all_gather_padded(gradient.indices()[0])
    values = all_gather_padded(gradient.values())
    total = torch.sparse_coo_tensor(rows.unsqueeze(0), values, gradient.shape).coalesce()
    return total / dist.get_world_size()


def broadcast_sparse_parameters(module: torch.nn.Module, inputs) -> None:
    """Forward pre-hook: before the first training forward under several processes, every
    process takes rank 0's sparse parameters (DDP broadcasts only the ones it manages)."""
    if (
        module.training
        and is_multiprocess()
        and not getattr(module, "_sparse_parameters_broadcast", False)
    ):
        parameters = dict(module.named_parameters())
        with torch.no_grad():
            for name in sparse_parameter_names(module):
                dist.broadcast(parameters[name], src=0)
        # a plain flag (torch types module attributes as tensors and modules)
        module._sparse_parameters_broadcast = True  # type: ignore[assignment]


def synchronize_sparse_gradients(module: torch.nn.Module) -> None:
    """
    Makes `module`'s sparse embeddings train under allennlp's DDP on gloo and NCCL alike (NCCL
    cannot all-reduce sparse tensors, and DDP's buckets hold dense ones): DDP is told to ignore
    them and their `TableRows`. Each backward pass replaces a sparse gradient by the average
    over processes of the touched rows, gathered from every process (row ids + values) before
    it is accumulated into `.grad`. A `TableRows` gradient (the same rows on every process:
    `TouchedRows` reads every process's ids) is averaged by `TouchedRows` itself (an
    all-reduce at its fixed shape).
    Outside torch.distributed (or with one process) nothing changes.
    """
    tables, rows = sparse_parameter_names(module), rows_parameter_names(module)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, tables + rows)
    parameters = dict(module.named_parameters())
    for name in sparse_gradient_names(module):
        parameters[name].register_hook(average_sparse_gradient)
    module.register_forward_pre_hook(broadcast_sparse_parameters)
