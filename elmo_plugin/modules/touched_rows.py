"""The rows of a large table that a training step reads, as one parameter of fixed shape whose
gradient an optimizer applies to the table's rows: a sparse gradient without sparse tensors."""

import copy
from typing import Any, cast

import torch
import torch.distributed as dist


class TableRows(torch.nn.Parameter):
    """
    (n, dim): the rows `ids` (n,) of `table` (rows, dim) that this step read, `ids` sorted. Each
    id's first slot (`first`) carries the gradient of all of that id's reads; its other slots
    get none. So the gradient is exactly the table's sparse gradient, duplicates summed, at a
    shape that depends on the batch's shape only, and its norm counts each row once. An
    optimizer that knows `TableRows` (`elmo_adagrad`, `fused_adam`) applies it to `table`.
    """

    table: torch.Tensor
    ids: torch.Tensor
    first: torch.Tensor

    def __new__(cls, table: torch.Tensor) -> "TableRows":
        rows = super().__new__(cls, table.detach().new_empty(0, *table.shape[1:]))
        rows.table = table
        rows.ids = torch.zeros(0, dtype=torch.long, device=table.device)
        rows.first = torch.zeros(0, dtype=torch.bool, device=table.device)
        return rows

    def __deepcopy__(self, memo: dict[int, Any]) -> "TableRows":
        rows = TableRows(copy.deepcopy(self.table, memo))
        rows.data, rows.ids, rows.first = self.data.clone(), self.ids.clone(), self.first.clone()
        memo[id(self)] = rows
        return rows

    def read(self, ids: torch.Tensor, reads: slice) -> torch.Tensor:
        """Gathers `table[ids]` (under distributed training: every process's `ids`, the same on
        all) into these rows, after the rows of earlier reads whose gradient was not yet
        applied (gradient accumulation); -> (len(ids[reads]), dim) the rows of ids[reads],
        differentiable into their first slots.

        Autograd sees a new leaf holding the rows at every read (a parameter whose shape
        changes would keep an earlier graph's gradient shape); its gradient becomes these
        rows' once backward has accumulated it."""
        earlier = self.grad
        all_ids = ids if earlier is None else torch.cat([self.ids, ids])
        sorted_ids = all_ids.sort().values
        first = torch.ones_like(sorted_ids, dtype=torch.bool)
        first[1:] = sorted_ids[1:] != sorted_ids[:-1]
        gradient = None
        if earlier is not None:  # the gradient so far, moved to each id's slot among all rows
            slots = torch.searchsorted(sorted_ids, self.ids)
            gradient = earlier.new_zeros(len(sorted_ids), *self.shape[1:])
            gradient.index_add_(0, slots, earlier)
        leaf = self.table.detach().index_select(0, sorted_ids).requires_grad_()
        leaf.register_post_accumulate_grad_hook(self._add_gradient)
        self.data = leaf.detach()
        self.grad, self.ids, self.first = gradient, sorted_ids, first
        rows = AveragedOverProcesses.apply(leaf) if processes() > 1 else leaf
        return rows.index_select(0, torch.searchsorted(sorted_ids, ids[reads]))

    def _add_gradient(self, leaf: torch.Tensor) -> None:
        """After backward: the read's gradient added to these rows' (same ids, same slots)."""
        gradient = cast(torch.Tensor, leaf.grad)
        self.grad = gradient if self.grad is None else self.grad + gradient
        leaf.grad = None


def processes() -> int:
    """The number of processes of distributed training; 1 outside it."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class AveragedOverProcesses(torch.autograd.Function):
    """Identity forward; backward: the gradient averaged over processes (an all-reduce), as
    DDP averages dense gradients. For `TableRows`, which hold the same rows on every process."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, gradient: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        gradient = gradient.contiguous().clone()
        dist.all_reduce(gradient)
        return gradient / dist.get_world_size()


def gathered_ids(ids: torch.Tensor) -> tuple[torch.Tensor, slice]:
    """ids (m,) of this process -> (every process's ids in rank order, the slice that is this
    process's), for `TableRows.read` under distributed training; one process: (ids,
    everything). Processes with fewer ids (batches of other shapes) pad theirs with id 0, a row
    read with no gradient; the numbers of ids are gathered and read on the host for that, once
    per read."""
    if processes() == 1:
        return ids, slice(None)
    size = torch.tensor([len(ids)], device=ids.device)
    sizes = [torch.empty_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    longest = int(torch.cat(sizes).max())
    parts = [ids.new_zeros(longest) for _ in sizes]
    dist.all_gather(parts, torch.nn.functional.pad(ids, (0, longest - len(ids))))
    start = dist.get_rank() * longest
    return torch.cat(parts), slice(start, start + len(ids))


class TouchedRows(torch.nn.Module):
    """
    `tables` read through `TableRows`: ids (m,) -> one (m, dim) tensor per table, its gradient
    in that table's `TableRows` (registered parameters `rows_0`, `rows_1`, ...). The rows are
    refilled at every read, so they are not part of the state dict: the tables are.
    """

    def __init__(self, tables: list[torch.Tensor]) -> None:
        super().__init__()
        for index, table in enumerate(tables):
            self.register_parameter(f"rows_{index}", TableRows(table))

    def tables_rows(self) -> list[TableRows]:
        return [rows for rows in self.parameters() if isinstance(rows, TableRows)]

    def forward(self, ids: torch.Tensor) -> list[torch.Tensor]:
        all_ids, reads = gathered_ids(ids)
        return [rows.read(all_ids, reads) for rows in self.tables_rows()]

    # Not saved, nothing to load: the rows are this step's copy of the tables' rows.
    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        pass

    def _load_from_state_dict(
        self,
        state_dict,
        prefix,
        local_metadata,
        strict,
        missing_keys,
        unexpected_keys,
        error_msgs,
    ) -> None:
        pass
