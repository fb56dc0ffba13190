"""elmo_adagrad and fused_adam on `TableRows` gradients: the updates torch's sparse Adagrad and
SparseAdam make from the same gradients as sparse tensors, repeated ids included, with no host
read and no data-dependent shape."""

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import Optimizer

from benchmarks.support.op_audit import OpAudit, host_step_counters
from elmo_plugin.modules.touched_rows import TouchedRows
from elmo_plugin.training.elmo_adagrad import ElmoAdagradOptimizer

ADAGRAD = {"type": "elmo_adagrad", "lr": 0.2, "initial_accumulator_value": 1.0, "lr_decay": 0.1}
ADAM = {"type": "fused_adam", "lr": 0.01, "betas": [0.9, 0.98], "eps": 1e-9}
REFERENCE = {"elmo_adagrad": {**ADAGRAD, "type": "adagrad"}, "fused_adam": ADAM}
# ids read at each step: repeated ids, ids of earlier steps, rows never read
STEPS = [[3, 1, 3, 3, 7], [7, 7, 0, 2, 3], [9, 1, 1, 4, 4]]


class SparseTable(torch.nn.Module):
    """A (10, 4) table read as a sparse embedding, next to a dense layer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Embedding(10, 4, sparse=True)
        self.dense = torch.nn.Linear(4, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dense(torch.tanh(self.rows(ids))).pow(2).sum()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids)


class RowsTable(SparseTable):
    """The same, read through `TouchedRows`."""

    def __init__(self) -> None:
        super().__init__()
        self.touched = TouchedRows([self.table.weight])

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self.touched(ids)[0]


def train(model: torch.nn.Module, settings: dict, audit: OpAudit) -> torch.optim.Optimizer:
    optimizer = Optimizer.from_params(
        model_parameters=list(model.named_parameters()), params=Params(dict(settings))
    )
    for ids in STEPS:
        optimizer.zero_grad(set_to_none=True)
        model(torch.tensor(ids)).backward()
        audit.on_host(host_step_counters(optimizer))
        audit.run("step", optimizer.step)
    return optimizer


@pytest.mark.parametrize("name", ["elmo_adagrad", "fused_adam"])
def test_rows_update_equals_torchs_sparse_update_with_repeated_ids(name):
    """3 steps: the table, its optimizer state and the dense layer equal (1e-6) what torch's
    sparse update gives from sparse gradients; untouched rows keep weights and state."""
    sparse, rows = SparseTable(), RowsTable()
    reference = train(sparse, REFERENCE[name], OpAudit())
    optimizer = train(rows, {**REFERENCE[name], "type": name}, OpAudit())
    torch.testing.assert_close(rows.table.weight, sparse.table.weight, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(rows.dense.weight, sparse.dense.weight, atol=1e-6, rtol=1e-6)
    ours, theirs = optimizer.state[rows.table.weight], reference.state[sparse.table.weight]
    for key in theirs:
        torch.testing.assert_close(ours[key].float(), theirs[key].float(), atol=1e-6, rtol=1e-6)
    untouched = [5, 6, 8]
    assert torch.equal(rows.table.weight[untouched], SparseTable().table.weight[untouched])


@pytest.mark.parametrize("name", ["elmo_adagrad", "fused_adam"])
def test_rows_update_reads_nothing_on_the_host(name):
    audit = OpAudit()
    train(RowsTable(), {**REFERENCE[name], "type": name}, audit)
    assert audit.syncs("step") == []


def test_elmo_adagrad_is_registered_and_refuses_weight_decay_on_rows():
    model = RowsTable()
    optimizer = Optimizer.from_params(
        model_parameters=list(model.named_parameters()),
        params=Params({**ADAGRAD, "weight_decay": 0.1}),
    )
    assert isinstance(optimizer, ElmoAdagradOptimizer)
    model(torch.tensor([1, 2])).backward()
    with pytest.raises(ConfigurationError, match="weight_decay 0"):
        optimizer.step()
