"""modules/touched_rows: a table's rows read at a fixed shape, their gradient exactly the table's
sparse gradient with duplicates summed, outside the state dict."""

import copy
from typing import cast

import torch

from benchmarks.support.op_audit import OpAudit
from elmo_plugin.modules.touched_rows import TableRows, TouchedRows


def sparse_gradient(table: torch.Tensor, reads: list[torch.Tensor], weights) -> torch.Tensor:
    """The (rows, dim) dense gradient of sum(w * table[ids]) through a sparse embedding."""
    embedding = torch.nn.Embedding.from_pretrained(table.clone(), freeze=False, sparse=True)
    sum((embedding(ids) * w).sum() for ids, w in zip(reads, weights, strict=True)).backward()
    return embedding.weight.grad.coalesce().to_dense()


def scattered(rows: TableRows) -> torch.Tensor:
    """A `TableRows`' gradient as a dense (rows, dim) table gradient."""
    return torch.zeros_like(rows.table).index_add_(0, rows.ids, cast(torch.Tensor, rows.grad))


def test_rows_read_the_table_and_their_gradient_is_the_sparse_one_with_each_row_once():
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(10, 3))
    touched = TouchedRows([table])
    ids = torch.tensor([4, 1, 4, 9, 1, 4])
    weight = torch.randn(6, 3)
    (rows,) = touched(ids)
    torch.testing.assert_close(rows, table[ids].detach())
    (rows * weight).sum().backward()
    (table_rows,) = touched.tables_rows()
    assert table_rows.ids.tolist() == sorted(ids.tolist())
    assert table_rows.first.tolist() == [True, False, True, False, False, True]
    assert not table_rows.grad[~table_rows.first].any()  # repeated slots carry nothing
    torch.testing.assert_close(scattered(table_rows), sparse_gradient(table, [ids], [weight]))
    # its norm is the sparse gradient's: each row counted once
    torch.testing.assert_close(
        table_rows.grad.norm(), sparse_gradient(table, [ids], [weight]).norm()
    )
    assert table.grad is None


def test_a_second_read_before_the_update_keeps_the_first_gradient_gradient_accumulation():
    torch.manual_seed(1)
    table = torch.nn.Parameter(torch.randn(12, 2))
    touched = TouchedRows([table])
    reads = [torch.tensor([3, 5, 3]), torch.tensor([5, 11, 0, 0])]
    weights = [torch.randn(3, 2), torch.randn(4, 2)]
    for ids, weight in zip(reads, weights, strict=True):
        (touched(ids)[0] * weight).sum().backward()
    (table_rows,) = touched.tables_rows()
    assert table_rows.ids.tolist() == [0, 0, 3, 3, 5, 5, 11]
    torch.testing.assert_close(scattered(table_rows), sparse_gradient(table, reads, weights))


def test_reads_dispatch_no_syncing_op_and_the_same_shapes_for_other_ids():
    table = torch.nn.Parameter(torch.randn(50, 4))
    touched = TouchedRows([table, torch.nn.Parameter(torch.randn(50, 1))])
    traces = []
    for ids in (torch.tensor([1, 2, 3, 3, 49]), torch.tensor([7, 7, 7, 0, 1])):
        touched.zero_grad(set_to_none=True)
        with OpAudit() as audit:
            sum(rows.sum() for rows in touched(ids)).backward()
        assert audit.syncs() == []
        traces.append(audit.trace())
    assert traces[0] == traces[1]


def test_rows_are_not_in_the_state_dict_and_a_deep_copy_reads_its_own_table():
    module = torch.nn.Module()
    module.table = torch.nn.Parameter(torch.randn(5, 2))
    module.touched = TouchedRows([module.table])
    module.touched(torch.tensor([1, 2]))
    assert list(module.state_dict()) == ["table"]
    module.load_state_dict({"table": torch.zeros(5, 2)})
    copied = copy.deepcopy(module)
    (rows,) = copied.touched.tables_rows()
    assert rows.table is copied.table and rows.table is not module.table
    assert isinstance(rows, TableRows) and torch.equal(rows.ids, torch.tensor([1, 2]))
