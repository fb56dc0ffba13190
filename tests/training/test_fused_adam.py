"""fused_adam: the same updates and checkpoints as allennlp's "adam"."""
import copy

import torch
from allennlp.common import Params
from allennlp.training.optimizers import AdamOptimizer, Optimizer

from elmo_plugin.training.fused_adam import FusedAdamOptimizer

SETTINGS = {"lr": 0.01, "betas": [0.9, 0.98], "eps": 1e-9, "weight_decay": 0.01}


def model_and_optimizer(optimizer_type: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    optimizer = Optimizer.from_params(
        model_parameters=list(model.named_parameters()), params=Params({"type": optimizer_type, **SETTINGS})
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
    for fused_parameter, plain_parameter in zip(fused_model.parameters(), plain_model.parameters()):
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
    for parameter, resumed_parameter in zip(model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(resumed_parameter, parameter, atol=0, rtol=0)
