"""Continuum Dropout on Neural CDEs: what the mask pauses (``scope``) and that a masked CDE still learns."""
import math

import pytest
import torch
import torch.nn.functional as F
import torchcde
from ndebench.models.base import DataSpec
from ndebench.models.integrate import SolverConfig, TrialRNG, integrate
from ndebench.models.registry import create_model
from ndebench.regularizers.continuum_dropout import ContinuumDropout
from torch import nn

TIMES = torch.linspace(0, 1, 20)
SOLVER = SolverConfig(method="euler", adjoint=False)


class Columns(nn.Module):
    """A CDE field ``f(z) (B, H, 2)`` whose time column is ``time`` and data column ``data`` times ``tanh(z)``."""

    def __init__(self, time: float, data: float):
        super().__init__()
        self.scale = torch.tensor([time, data])

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(z).unsqueeze(-1) * self.scale + 0.5 * self.scale


def _solve(field: nn.Module, regularizer: ContinuumDropout | None) -> torch.Tensor:
    x = torch.randn(4, 20, 1, generator=torch.Generator().manual_seed(3)).cumsum(1)
    path = torch.cat([TIMES.view(1, -1, 1).expand(4, -1, 1), x], dim=-1)
    control = torchcde.CubicSpline(torchcde.natural_cubic_coeffs(path, t=TIMES), t=TIMES)
    if regularizer is not None:
        regularizer.train()
    z0 = torch.linspace(-1, 1, 4 * 6).view(4, 6)
    return integrate(field, z0, TIMES, solver=SOLVER, rng=TrialRNG.from_seed(0), control=control,
                     regularizer=regularizer)


def test_time_scope_integrates_every_data_increment_unmasked():
    data_only = Columns(time=0.0, data=1.0)
    plain = _solve(data_only, None)
    assert torch.equal(_solve(data_only, ContinuumDropout(p=0.5, m=5, scope="time")), plain)
    assert not torch.allclose(_solve(data_only, ContinuumDropout(p=0.5, m=5)), plain)


def test_time_scope_pauses_the_time_channel_exactly_as_the_whole_increment_does():
    time_only = Columns(time=1.0, data=0.0)
    whole = _solve(time_only, ContinuumDropout(p=0.5, m=5))
    assert torch.allclose(_solve(time_only, ContinuumDropout(p=0.5, m=5, scope="time")), whole, atol=1e-6)
    assert not torch.allclose(whole, _solve(time_only, None))


def test_scope_is_checked_and_refused_by_models_without_a_control_path():
    with pytest.raises(ValueError, match=r"scope='data' must be 'increment' \(the paper's method\) or 'time' "
                                         r"\(ndebench's extension"):
        ContinuumDropout(scope="data")
    spec = DataSpec(1, 2, times=TIMES)
    with pytest.raises(ValueError, match="scope='time' .ndebench's extension, not the paper's method. applies to "
                                         "CDE models only.*valid here: 'increment'"):
        create_model("neural_ode", spec, regularizer=ContinuumDropout(scope="time"))
    assert ContinuumDropout(scope="time").describe()["scope"] == "time"


def _two_class_problem(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Univariate series ``x(t) = (-1)^y sin(2 pi t) + noise``: the class is in the data increments only."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % 2
    sign = 1.0 - 2.0 * y.float()
    x = sign.view(-1, 1) * torch.sin(2 * math.pi * TIMES) + 0.1 * torch.randn(n, len(TIMES), generator=g)
    return x.unsqueeze(-1), y


@pytest.mark.parametrize("scope", ["increment", "time"])
def test_a_masked_neural_cde_learns_a_learnable_two_class_problem(scope):
    """p = 0.1, m = 5 on a fixed problem: the training loss ends well below chance (ln 2) in 25 epochs."""
    torch.manual_seed(0)
    values, y = _two_class_problem()
    model = create_model("neural_cde", DataSpec(1, 2, times=TIMES), hidden_size=8, solver=SOLVER,
                         regularizer=ContinuumDropout(p=0.1, m=5, scope=scope))
    inputs = model.prepare(TIMES, values)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rng = TrialRNG.from_seed(0)
    model.train()
    for _ in range(25):
        for batch in torch.randperm(len(y), generator=rng.shuffle).split(16):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs[batch], rng), y[batch])
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        final = F.cross_entropy(model(inputs, rng), y).item()
    assert final < 0.5 * math.log(2)
