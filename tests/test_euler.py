"""The Euler solve of z(T) stepped by ndebench (models/euler.py): torchdiffeq's Euler, bit for bit."""
import pytest
import torch
import torch.nn.functional as F
import torchdiffeq
from ndebench.models import integrate as integrate_module
from ndebench.models.base import DataSpec
from ndebench.models.euler import euler_final
from ndebench.models.integrate import SolverConfig, TrialRNG, pass_grid
from ndebench.models.registry import create_model, list_models, model_info
from ndebench.regularizers.continuum_dropout import ContinuumDropout
from ndebench.regularizers.registry import create_regularizer
from torch import nn

# the models solved by torchdiffeq (ODEs and CDEs), whose Euler training passes now step in models/euler.py
SOLVED = [name for name in list_models()
          if model_info(name).input_kind == "timeseries" and model_info(name).family != "sde"]
REGULARIZERS = {"none": {}, "continuum_dropout": {"p": 0.4, "m": 5}, "jump_diffusion": {"rate": 0.3},
                "steer": {}}


class Field(nn.Module):
    """``f(t, z) = tanh(W z + t b)``: the time enters, so the perturbed stage times must match too."""

    def __init__(self, size: int, dtype: torch.dtype):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(size, size, dtype=dtype)
        self.time = nn.Parameter(torch.randn(size, dtype=dtype))

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(z) + t * self.time)


def _solve_and_grads(solve, field: Field, z0: torch.Tensor) -> list[torch.Tensor]:
    z0 = z0.clone().requires_grad_(True)
    out = solve(field, z0)
    (out.square() * torch.linspace(0.5, 1.5, out.shape[-1], dtype=out.dtype)).sum().backward()
    grads = [out.detach(), z0.grad] + [p.grad.clone() for p in field.parameters()]
    field.zero_grad()
    return grads


@pytest.mark.parametrize("times_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("step_size", [None, 0.07])
def test_the_euler_solve_is_torchdiffeq_s_bit_for_bit(times_dtype, state_dtype, step_size):
    # irregular observation times, so every step has its own dt; 0.07 does not divide the span (a short last step)
    times = torch.tensor([0.0, 0.05, 0.21, 0.3, 0.55, 0.61, 0.9, 1.0], dtype=times_dtype).cumsum(0) / 2
    field = Field(6, state_dtype)
    z0 = torch.randn(5, 6, dtype=state_dtype, generator=torch.Generator().manual_seed(1))
    grid = {"step_size": step_size} if step_size else {"grid_constructor": lambda f, y, t: times}
    options = {"perturb": True, **grid}

    def reference(f, z):
        return torchdiffeq.odeint(f, z, times[[0, -1]], method="euler", options=options)[-1]

    def ours(f, z):
        return euler_final(f, z, pass_grid(times, SolverConfig("euler", step_size=step_size)))

    expected, got = _solve_and_grads(reference, field, z0), _solve_and_grads(ours, field, z0)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


@pytest.mark.parametrize("times", [[0.0, 0.5, 0.5, 1.0], [1.0, 0.5, 0.0], [0.0]])
def test_a_grid_that_does_not_strictly_increase_is_left_to_torchdiffeq(times):
    solver = SolverConfig("euler")
    assert integrate_module._euler_grid(torch.tensor(times), solver, "final", torch.device("cpu")) is None
    assert integrate_module._euler_grid(torch.tensor([0.0, 1.0]), solver, "final", torch.device("cpu")) is not None


def _training_pass(name: str, regularizer: str, lean: bool, monkeypatch) -> list[torch.Tensor]:
    times = torch.arange(9, dtype=torch.float32) / 8
    torch.manual_seed(0)
    model = create_model(name, DataSpec(3, 4, times=times), hidden_size=8,
                         regularizer=create_regularizer(regularizer, **REGULARIZERS[regularizer]),
                         solver=SolverConfig("euler"))
    values = torch.randn(6, times.numel(), 3, generator=torch.Generator().manual_seed(2))
    inputs = model.prepare(times, values)
    with monkeypatch.context() as patch:
        if not lean:
            patch.setattr(integrate_module, "_euler_grid", lambda *args: None)
        model.train()
        logits = model(inputs, TrialRNG.from_seed(3))
        F.cross_entropy(logits, torch.arange(6) % 4).backward()
    return [logits.detach()] + [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("regularizer", list(REGULARIZERS))
@pytest.mark.parametrize("name", SOLVED)
def test_every_model_trains_as_through_torchdiffeq(name, regularizer, monkeypatch):
    """A training pass (logits and every gradient) is the same bits as with torchdiffeq's Euler: with Continuum
    Dropout's mask taken into the step (ODE-RNN: across its calls per interval), jump diffusion's per-step jumps
    (read by counted step) and STEER's moved end time."""
    expected = _training_pass(name, regularizer, False, monkeypatch)
    got = _training_pass(name, regularizer, True, monkeypatch)
    assert len(expected) == len(got) and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def test_the_mask_is_taken_into_the_step_and_not_applied_to_the_field(monkeypatch):
    calls = []
    real = ContinuumDropout.modulate
    monkeypatch.setattr(ContinuumDropout, "modulate", lambda self, *args: calls.append(1) or real(self, *args))
    for mask, modulated in (("left", False), ("occupancy", True)):
        calls.clear()
        model = create_model("neural_ode", DataSpec(3, 4, times=torch.linspace(0, 1, 6)), hidden_size=8,
                             regularizer=ContinuumDropout(p=0.4, m=5, mask=mask), solver=SolverConfig("euler"))
        model.train()
        model(model.prepare(torch.linspace(0, 1, 6), torch.randn(2, 6, 3)), TrialRNG.from_seed(0))
        assert bool(calls) == modulated, mask
