"""CUDA-graph solves, the parts a CPU can check: which solves are captured and why the others are not (a pure
decision), and that the captured step loop computes what the eager torchdiffeq solve computes, mask included.
The capture itself is checked on a GPU in ``test_gpu.py``."""
from __future__ import annotations

import copy

import pytest
import torch
from fakes import DEVICES
from ndebench.models import graphs
from ndebench.models.base import DataSpec
from ndebench.models.graphs import CAPTURED, GridSolve, graph_decision
from ndebench.models.integrate import SolverConfig, TrialRNG, _Field, begin_pass, integrate
from ndebench.models.registry import create_model, list_models, model_info
from ndebench.regularizers.continuum_dropout import ContinuumDropout
from ndebench.regularizers.registry import create_regularizer

BASE = dict(setting="auto", device="cuda", method="euler", adjoint=False, step_size=None, kind="ode",
            model_blocker=None, regularizer_blocker=None, verified=("euler", "rk4"))


@pytest.mark.parametrize("change,reason", [
    ({}, None),
    ({"method": "rk4"}, None),
    ({"setting": "off"}, "solver.cuda_graph=off"),
    ({"device": "cpu"}, "device cpu"),
    ({"kind": "sde"}, None),
    ({"kind": "sde", "method": "milstein"}, "SDE method 'milstein' is not captured"),
    ({"method": "dopri5"}, "method 'dopri5' is not captured"),
    ({"adjoint": True}, "adjoint"),
    ({"step_size": 0.1}, "step_size=0.1"),
    ({"model_blocker": "reads a control"}, "reads a control"),
    ({"regularizer_blocker": "random end time"}, "random end time"),
    ({"method": "midpoint"}, "midpoint capture has not been compared with the eager pass on a GPU"),
    ({"method": "midpoint", "setting": "on"}, None),
    ({"verified": ()}, "solver.cuda_graph: on captures it"),
    ({"setting": "stack"}, None),
    ({"setting": "stack", "verified": ()}, "solver.cuda_graph: on captures it"),
    ({"setting": "on", "adjoint": True}, "adjoint"),
])
def test_the_decision_captures_fixed_grid_solves_and_names_the_reason_otherwise(change, reason):
    note = graph_decision(**{**BASE, **change})
    assert note == CAPTURED if reason is None else (note.startswith("eager: ") and reason in note)


@pytest.mark.parametrize("name", [m for m in list_models() if model_info(m).input_kind == "timeseries"])
def test_every_model_states_its_graph_decision(name):
    times = torch.linspace(0, 1, 8)
    model = create_model(name, DataSpec(2, 3, times=times), hidden_size=4,
                         regularizer=create_regularizer("continuum_dropout", p=0.3, m=5))
    assert model.graph_note("cpu").startswith("eager: device cpu")
    note = model.graph_note(torch.device("cuda"))
    capturable = (name in ("neural_ode", "neural_cde") and model.solver.method in ("euler", "midpoint", "rk4")
                  or name == "neural_sde" and model.solver.method == "euler")
    verified = model.solver.method in type(model).__dict__.get("graph_verified", ())
    assert (note == CAPTURED) == (capturable and verified and not model.solver.adjoint), note
    for setting, captures in (("on", capturable), ("auto", capturable and verified)):
        direct = create_model(name, DataSpec(2, 3, times=times), hidden_size=4,
                              solver=SolverConfig(model.solver.method, adjoint=False, cuda_graph=setting))
        assert (direct.graph_note("cuda") == CAPTURED) == captures, (setting, direct.graph_note("cuda"))
    off = create_model(name, DataSpec(2, 3, times=times), hidden_size=4,
                       solver=SolverConfig(model.solver.method, cuda_graph="off"))
    assert off.graph_note("cuda") == "eager: solver.cuda_graph=off"


def test_an_unknown_graph_setting_is_named_with_the_valid_ones():
    with pytest.raises(ValueError, match="cuda_graph='always'.*valid: auto, on, stack, off"):
        SolverConfig(cuda_graph="always")


class MatrixField(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = torch.nn.Linear(hidden + 1, hidden)

    def forward(self, t, z):
        return torch.tanh(self.net(torch.cat([t.expand(z.shape[0], 1), z], dim=-1)))


@pytest.mark.parametrize("method", ["euler", "midpoint", "rk4"])
@pytest.mark.parametrize("regularizer", ["none", "continuum_dropout"])
def test_the_captured_step_loop_is_the_eager_solve_with_the_same_mask(method, regularizer):
    times = torch.linspace(0, 1, 21, dtype=torch.float64)
    z0 = torch.randn(16, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    field = MatrixField(6).double()
    reg = create_regularizer(regularizer, **({"p": 0.4, "m": 20} if regularizer != "none" else {}))
    reg.train()
    solver = SolverConfig(method)
    eager = integrate(field, z0, times, solver=solver, rng=TrialRNG.from_seed(5), regularizer=reg, output="times")
    draw = begin_pass(reg, z0, times, solver=solver, rng=TrialRNG.from_seed(5))
    clock = None if draw is None else draw.spec.clock
    looped = GridSolve(_Field(field, None, reg, draw), times.tolist(), method, clock, dtype=z0.dtype)(z0)
    assert torch.allclose(looped, eager, rtol=0, atol=1e-12)
    if isinstance(reg, ContinuumDropout):
        plain = integrate(field, z0, times, solver=solver, rng=TrialRNG.from_seed(5), output="times")
        assert not torch.allclose(looped, plain)


@pytest.mark.parametrize("method,step_size", [("euler", None), ("rk4", None), ("midpoint", 0.013)])
def test_asking_for_z_at_T_only_steps_the_same_grid_bit_for_bit(method, step_size):
    times = torch.linspace(0, 1, 30)
    results = []
    for output in ("final", "times"):
        torch.manual_seed(0)
        field = MatrixField(8)
        z0 = torch.randn(5, 8, requires_grad=True)
        path = integrate(field, z0, times, solver=SolverConfig(method, step_size=step_size), rng=TrialRNG.from_seed(1),
                         regularizer=ContinuumDropout(0.3, 10), output=output)
        zT = path if output == "final" else path[-1]
        zT.square().sum().backward()
        results.append([zT.detach(), z0.grad, *(p.grad for p in field.parameters())])
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,options", [("neural_ode", {}), ("neural_cde", {"interpolation": "linear"}),
                                          ("neural_cde", {"interpolation": "natural"})])
@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_a_captured_pass_equals_the_eager_one_with_a_fresh_mask_and_control_each_time(monkeypatch, name, options,
                                                                                      method, device):
    # On a GPU the solve is captured and replayed. On the CPU the capture is stood in for by the eager module:
    # what is checked there is the cache's bookkeeping, one entry per shape, and each pass's own mask and control
    # path (a linear path's slope jumps at the knots: the perturbed stage times pick the step's own piece)
    # copied into the buffers the captured field reads.
    if device == "cpu":
        monkeypatch.setattr(torch.cuda, "make_graphed_callables", lambda module, sample_args: module)
    times = torch.linspace(0, 1, 20)
    models = []
    for setting in ("on", "off"):
        torch.manual_seed(0)
        regularizer = create_regularizer("continuum_dropout", p=0.4, m=10)
        models.append(create_model(name, DataSpec(3, 4, times=times), hidden_size=8, regularizer=regularizer,
                                   solver=SolverConfig(method, cuda_graph=setting), **options).to(device))
    captured, eager = models
    if device == "cpu":
        captured._graph_notes["cpu"] = CAPTURED
    values = [torch.randn(6, 20, 3, generator=torch.Generator().manual_seed(i)).to(device) for i in (1, 2)]
    batches = [eager.prepare(times.to(device), v) for v in values]
    rngs = TrialRNG.from_seed(0), TrialRNG.from_seed(0)
    outputs = []
    for inputs in (batches[0], batches[1], batches[0]):
        passes = []
        for model, rng in zip(models, rngs, strict=True):
            model.train()
            model.zero_grad(set_to_none=True)
            torch.manual_seed(len(outputs))  # the head's dropout draws from torch's global generator
            logits = model(inputs, rng)
            logits.square().sum().backward()
            passes.append([logits.detach().clone(), *(p.grad.clone() for p in model.field.parameters())])
        assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(*passes, strict=True))
        outputs.append(passes[0][0])
    assert captured.graph_note(device) == CAPTURED and eager.graph_note(device) != CAPTURED
    assert len(captured._graphs.entries) == 1 and not eager._graphs.entries
    assert not torch.allclose(outputs[0], outputs[2])  # the same batch, another mask


def test_a_capture_that_fails_falls_back_to_eager_with_the_reason_and_the_same_numbers(monkeypatch):
    # A capture that raises (as CUDA does for an operation it refuses while capturing) must leave the pass
    # eager, with the one-line reason on the model, and numbers equal to an eager model's; on a GPU the
    # process's generator state is restored too (test_gpu.py checks that on the device).
    def refuse(module, sample_args):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", refuse)
    times = torch.linspace(0, 1, 12)
    models = []
    for setting in ("on", "off"):
        torch.manual_seed(0)
        models.append(create_model("neural_cde", DataSpec(3, 4, times=times), hidden_size=8,
                                   regularizer=create_regularizer("continuum_dropout", p=0.3, m=5),
                                   solver=SolverConfig("euler", cuda_graph=setting)))
    failing, eager = models
    failing._graph_notes["cpu"] = CAPTURED
    inputs = eager.prepare(times, torch.randn(5, 12, 3, generator=torch.Generator().manual_seed(1)))
    outs = []
    for model in models:
        model.train()
        torch.manual_seed(1)
        outs.append(model(inputs, TrialRNG.from_seed(0)))
    assert failing.graph_note("cpu") == ("eager: capture failed: RuntimeError: CUDA error: operation not permitted "
                                         "when stream is capturing")
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("interpolation", ["linear", "natural", "hermite"])
def test_the_control_indexed_on_the_host_has_the_same_derivative_to_the_bit(interpolation):
    times = torch.linspace(0, 1, 9)
    model = create_model("neural_cde", DataSpec(3, 4, times=times), hidden_size=4, interpolation=interpolation)
    inputs = model.prepare(times, torch.randn(5, 9, 3, generator=torch.Generator().manual_seed(2)))
    control, _, _ = model.encoder.encode(times, inputs)
    clock = graphs._HostTime()
    staged = graphs.host_indexed(copy.deepcopy(control), clock)
    ends = graphs._perturbed_ends(times.tolist(), torch.float32)
    for t in [e for pair in ends for e in pair] + [0.0, 0.5, 1.0, 0.3 + 1e-7]:
        clock.t = torch.tensor(t).item()
        assert torch.equal(staged.derivative(torch.tensor(t)), control.derivative(torch.tensor(t))), t


def test_a_stack_solves_eagerly_since_its_gathered_weights_cannot_be_captured():
    from ndebench.platform.worker.stack import Stack

    times = torch.linspace(0, 1, 8)
    model = create_model("neural_cde", DataSpec(3, 4, times=times), hidden_size=4,
                         solver=SolverConfig("euler", cuda_graph="on"))
    assert model.graph_note("cuda") == CAPTURED
    assert Stack(model).model.graph_note("cuda") == "eager: solver.cuda_graph=off"
    assert model.graph_note("cuda") == CAPTURED


class OU(torch.nn.Module):
    """The drift ``-theta z`` of an Ornstein-Uhlenbeck process."""

    def forward(self, t, z):
        return -0.5 * z


class Constant(torch.nn.Module):
    def forward(self, t, z):
        return torch.full_like(z, 0.8)


@pytest.mark.parametrize("device", DEVICES)
def test_the_captured_euler_maruyama_solve_has_the_law_of_torchsde_s(monkeypatch, device):
    # dz = -theta z dt + sigma dW, z0 = 1 on [0, 1] with 20 Euler steps: both solvers' z(T) are Gaussian with
    # mean (1 - theta h)^n and variance sigma^2 h sum_k (1 - theta h)^(2k), exactly, whatever the random stream.
    # On the CPU the capture is stood in for by the eager module; on a GPU it is captured and replayed.
    if device == "cpu":
        monkeypatch.setattr(torch.cuda, "make_graphed_callables", lambda module, sample_args: module)
    times, n, theta, sigma = torch.linspace(0, 1, 21, dtype=torch.float64, device=device), 20_000, 0.5, 0.8
    h = 1 / 20
    mean = (1 - theta * h) ** 20
    var = sigma**2 * h * sum((1 - theta * h) ** (2 * k) for k in range(20))
    for graphed in (True, False):
        z0 = torch.ones(n, 2, dtype=torch.float64, device=device, requires_grad=True)
        cache = graphs.GraphCache() if graphed else None
        zT = integrate(OU(), z0, times, solver=SolverConfig("euler"), rng=TrialRNG.from_seed(4), diffusion=Constant(),
                       graphs=cache).detach()
        assert (cache is None) or len(cache.entries) == 1
        se_mean, se_var = (var / zT.numel()) ** 0.5, var * (2 / (zT.numel() - 1)) ** 0.5
        assert abs(zT.mean().item() - mean) < 4 * se_mean, (graphed, zT.mean().item(), mean)
        assert abs(zT.var().item() - var) < 4 * se_var, (graphed, zT.var().item(), var)


def test_a_captured_sde_pass_draws_fresh_increments_and_a_fresh_mask_each_time(monkeypatch):
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", lambda module, sample_args: module)
    times = torch.linspace(0, 1, 11)
    model = create_model("neural_sde", DataSpec(3, 4, times=times), hidden_size=8,
                         regularizer=create_regularizer("continuum_dropout", p=0.3, m=5),
                         solver=SolverConfig("euler", cuda_graph="on"))
    model._graph_notes["cpu"] = CAPTURED
    model.train()
    inputs = model.prepare(times, torch.randn(4, 11, 3, generator=torch.Generator().manual_seed(0)))
    rng = TrialRNG.from_seed(1)
    first, second = (model.latent(inputs, rng) for _ in range(2))
    assert len(model._graphs.entries) == 1 and not torch.equal(first, second)
    again = TrialRNG.from_seed(1)
    again.load_state(TrialRNG.from_seed(1).state())
    assert torch.equal(model.latent(inputs, again), first)
