"""fused_adam: the same updates and checkpoints as allennlp's "adam"; SparseAdam's on sparse
gradients."""

import copy

import pytest
import torch
from allennlp.common import Params
from allennlp.common.checks import ConfigurationError
from allennlp.training.optimizers import AdamOptimizer, Optimizer

from elmo_plugin.training.fused_adam import FusedAdamOptimizer

SETTINGS = {"lr": 0.01, "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.01}


def model_and_optimizer(optimizer_type: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    optimizer = Optimizer.from_params(
        model_parameters=list(model.named_parameters()),
        params=Params({"type": optimizer_type, **SETTINGS}),
    )
    return model, optimizer


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        inputs = torch.randn(8, 6, generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        model(inputs).pow(2).mean().backward()
        optimizer.step()


def test_registered_and_fused():
    _, optimizer = model_and_optimizer("fused_adam")
    assert isinstance(optimizer, FusedAdamOptimizer)
    assert all(group["fused"] for group in optimizer.param_groups)


def test_same_parameters_as_allennlp_adam_after_training():
    fused_model, fused = model_and_optimizer("fused_adam")
    plain_model, plain = model_and_optimizer("adam")
    assert isinstance(plain, AdamOptimizer)
    train(fused_model, fused, range(20))
    train(plain_model, plain, range(20))
    for fused_parameter, plain_parameter in zip(
        fused_model.parameters(), plain_model.parameters(), strict=True
    ):
        torch.testing.assert_close(fused_parameter, plain_parameter, atol=1e-6, rtol=1e-5)
    moved = (fused_model[0].weight - model_and_optimizer("adam")[0][0].weight).abs().max()
    assert moved > 0.05  # the 20 steps did move the weights


def test_resumes_from_its_state_dict_exactly():
    model, optimizer = model_and_optimizer("fused_adam")
    train(model, optimizer, range(5))
    model_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    optimizer_state = copy.deepcopy(optimizer.state_dict())
    train(model, optimizer, range(5, 10))
    resumed_model, resumed = model_and_optimizer("fused_adam")
    resumed_model.load_state_dict(model_state)
    resumed.load_state_dict(optimizer_state)
    train(resumed_model, resumed, range(5, 10))
    for parameter, resumed_parameter in zip(
        model.parameters(), resumed_model.parameters(), strict=True
    ):
        torch.testing.assert_close(resumed_parameter, parameter, atol=0, rtol=0)


class SparseModel(torch.nn.Module):
    """A sparse embedding (rows 0..9, batches touch rows 0..5 only) feeding a dense layer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(10, 4, sparse=True)
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, step: int) -> torch.Tensor:
        ids = torch.randint(0, 6, (8,), generator=torch.Generator().manual_seed(step))
        return self.linear(self.embedding(ids)).pow(2).mean()


def train_sparse(model: SparseModel, optimizers, steps: range) -> None:
    for step in steps:
        for optimizer in optimizers:
            optimizer.zero_grad()
        model(step).backward()
        for optimizer in optimizers:
            optimizer.step()


def test_sparse_gradients_get_torch_sparse_adam_and_dense_ones_adam():
    """fused_adam over a model with a sparse embedding == torch's SparseAdam on the embedding +
    torch's Adam on the rest; untouched rows keep their weights and zero moments."""
    model = SparseModel()
    initial = model.embedding.weight.detach().clone()
    fused = Optimizer.from_params(
        model_parameters=list(model.named_parameters()),
        params=Params({"type": "fused_adam", **SETTINGS, "weight_decay": 0.0}),
    )
    train_sparse(model, [fused], range(10))
    reference = SparseModel()
    settings = {"lr": SETTINGS["lr"], "betas": SETTINGS["betas"], "eps": SETTINGS["eps"]}
    reference_optimizers = [
        torch.optim.SparseAdam([reference.embedding.weight], **settings),
        torch.optim.Adam(reference.linear.parameters(), **settings),
    ]
    train_sparse(reference, reference_optimizers, range(10))
    for parameter, reference_parameter in zip(
        model.parameters(), reference.parameters(), strict=True
    ):
        torch.testing.assert_close(parameter, reference_parameter, atol=1e-6, rtol=1e-5)
    assert (model.embedding.weight[:6] - initial[:6]).abs().min() > 0  # touched rows moved
    assert torch.equal(model.embedding.weight[6:], initial[6:])
    state = fused.state[model.embedding.weight]
    assert (
        int(state["step"]) == 10
        and not state["exp_avg"][6:].any()
        and not state["exp_avg_sq"][6:].any()
    )


def test_sparse_gradients_with_weight_decay_are_a_configuration_error():
    model = SparseModel()
    fused = Optimizer.from_params(
        model_parameters=list(model.named_parameters()),
        params=Params({"type": "fused_adam", **SETTINGS}),
    )
    model(0).backward()
    with pytest.raises(ConfigurationError, match="sparse gradients.*weight_decay 0"):
        fused.step()


def test_sparse_gradients_resume_from_the_state_dict_exactly():
    def fresh():
        model = SparseModel()
        settings = Params({"type": "fused_adam", **SETTINGS, "weight_decay": 0.0})
        return model, Optimizer.from_params(
            model_parameters=list(model.named_parameters()), params=settings
        )

    model, optimizer = fresh()
    train_sparse(model, [optimizer], range(5))
    model_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    optimizer_state = copy.deepcopy(optimizer.state_dict())
    train_sparse(model, [optimizer], range(5, 10))
    resumed_model, resumed = fresh()
    resumed_model.load_state_dict(model_state)
    resumed.load_state_dict(optimizer_state)
    train_sparse(resumed_model, [resumed], range(5, 10))
    for parameter, resumed_parameter in zip(
        model.parameters(), resumed_model.parameters(), strict=True
    ):
        torch.testing.assert_close(resumed_parameter, parameter, atol=0, rtol=0)
