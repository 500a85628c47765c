"""The latent layers' CPU kernel (``models/rowkernel.py``): a trial alone multiplies as a stack's member does, so
the default stack trains batched and each member still ends bit for bit as its trial alone."""
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from ndebench.models.base import DataSpec
from ndebench.models.registry import create_model
from ndebench.models.rowkernel import RowLinear, use_row_kernel
from ndebench.platform.worker import stack as stack_module
from ndebench.platform.worker.build import build_trial
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.stack import run_stack
from ndebench.platform.worker.stackexact import rounds_alone
from ndebench.platform.worker.stacklayers import with_stack_kernel
from test_stack import TRAINING, _same, _spec
from torch import nn


def test_the_latent_layers_use_the_row_kernel_and_the_head_and_regularizer_keep_torch_s():
    model = build_trial(_spec(0)).model
    kinds = {name: type(m) for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert {k for k, v in kinds.items() if v is RowLinear} == {k for k in kinds
                                                               if k.split(".")[0] not in ("head", "regularizer")}
    assert any(k.startswith("head") for k in kinds) and all(kinds[k] is nn.Linear for k in kinds
                                                            if k.startswith("head"))
    plain = nn.Linear(5, 7)
    assert list(use_row_kernel(nn.Sequential(plain)).state_dict()) == ["0.weight", "0.bias"]


def test_a_model_that_never_stacks_keeps_torch_s_kernel():
    """STEER's members end their passes at different times, so its trials never stack: no ``RowLinear`` cost."""
    kinds = {type(m) for m in build_trial(_spec(0, regularizer="steer", regularizer_params={})).model.modules()}
    assert nn.Linear in kinds and RowLinear not in kinds
    plain = create_model("neural_cde", DataSpec(3, 4, times=torch.linspace(0, 1, 9)), hidden_size=8)
    assert RowLinear not in {type(m) for m in plain.modules()}
    assert any(type(m) is RowLinear for m in with_stack_kernel(plain).modules())


@pytest.mark.parametrize("shape,bias", [((6, 5), True), ((4, 3, 5), True), ((6, 5), False)])
def test_the_row_kernel_is_a_linear_layer(shape, bias):
    torch.manual_seed(0)
    layer = use_row_kernel(nn.Sequential(nn.Linear(5, 7, bias=bias)))[0]
    x = torch.randn(*shape, requires_grad=True)
    y = layer(x)
    reference = F.linear(x, layer.weight, layer.bias)
    assert isinstance(layer, RowLinear) and y.shape == (*shape[:-1], 7)
    torch.testing.assert_close(y, reference, rtol=1e-6, atol=1e-6)
    grads = torch.autograd.grad(y.square().sum(), [x, layer.weight])
    torch.testing.assert_close(grads, torch.autograd.grad(reference.square().sum(), [x, layer.weight]))
    vector = torch.randn(5)
    assert torch.equal(layer(vector), F.linear(vector, layer.weight, layer.bias))


@pytest.mark.parametrize("regularizer,params", [("continuum_dropout", {"p": 0.3, "m": 10}), ("none", {})])
def test_the_default_stack_trains_batched_and_each_member_ends_as_its_trial_alone(monkeypatch, regularizer, params):
    """The Neural CDE of quickstart's kind: the batched stack (one ``baddbmm`` per layer for all members) passes
    its bit-for-bit check, so it does not fall back to each member's layers alone."""
    checked = []

    def spy(stack, members):
        checked.append(rounds_alone(stack, members))
        return checked[-1]

    monkeypatch.setattr(stack_module, "rounds_alone", spy)
    short = dataclasses.replace(TRAINING, epochs=3)
    specs = [_spec(seed, regularizer=regularizer, regularizer_params=params, training=short) for seed in (0, 1, 2)]
    stacked = run_stack(specs)
    assert checked == [True]
    for a, b in zip([run_trial(s) for s in specs], stacked, strict=True):
        _same(a, b)

