"""The host-synchronisation guard (:func:`~ndebench.models.graphs.host_sync_guard`) that the CPU suite runs
around regions meant for CUDA-graph capture: it rejects every kind of operation a capture refuses, and today's
captured Neural CDE step (the grid solve with its host-indexed control path and Continuum Dropout mask,
forward and backward) passes it."""
from __future__ import annotations

import pytest
import torch
from ndebench.models.base import DataSpec
from ndebench.models.graphs import GridSolve, HostSyncError, _HostTime, host_indexed, host_sync_guard
from ndebench.models.integrate import SolverConfig, TrialRNG, _Field, begin_pass
from ndebench.models.registry import create_model
from ndebench.regularizers.registry import create_regularizer

X = torch.tensor([0.5, -1.0, 0.0, 2.0])
REFUSED = {
    "item": lambda: X[0].item(),
    "tolist": lambda: X.tolist(),
    "cpu": lambda: X.cpu(),
    "numpy": lambda: X.numpy(),
    "bool": lambda: bool(X[0] > 0),
    "float": lambda: float(X[0]),
    "int": lambda: int(X[3]),
    "nonzero": lambda: torch.nonzero(X),
    "masked_select": lambda: torch.masked_select(X, X > 0),
    "boolean index": lambda: X[X > 0],
    "unique": lambda: torch.unique(X),
    "unique_consecutive": lambda: torch.unique_consecutive(X),
    "repeat_interleave": lambda: torch.repeat_interleave(X, torch.tensor([1, 2, 0, 1])),
    "equal": lambda: torch.equal(X, X),
    "allclose": lambda: torch.allclose(X, X),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_the_guard_rejects_each_kind_of_host_read_and_data_dependent_shape(kind):
    REFUSED[kind]()  # outside the guard it runs
    with pytest.raises(HostSyncError, match="a CUDA graph cannot replay it"), host_sync_guard():
        REFUSED[kind]()


def test_the_guard_lets_static_shapes_and_sized_repeats_through():
    with host_sync_guard():
        y = torch.where(X > 0, X, torch.zeros_like(X)).sum() + X[torch.tensor([0, 3])].sum()
        r = torch.repeat_interleave(X, torch.tensor([1, 2, 0, 1]), output_size=4)
    assert y.shape == () and r.shape == (4,)
    assert torch.equal(r, torch.tensor([0.5, -1.0, -1.0, 2.0]))


@pytest.mark.parametrize("method", ["euler", "rk4"])
def test_the_captured_neural_cde_step_passes_the_guard_on_the_cpu(method):
    times = torch.linspace(0, 1, 10)
    torch.manual_seed(0)
    regularizer = create_regularizer("continuum_dropout", p=0.3, m=5)
    model = create_model("neural_cde", DataSpec(3, 4, times=times), hidden_size=6, regularizer=regularizer,
                         solver=SolverConfig(method, cuda_graph="on"))
    model.train()
    inputs = model.prepare(times, torch.randn(5, 10, 3, generator=torch.Generator().manual_seed(1)))
    control, z0, _ = model.encoder.encode(times, inputs)
    draw = begin_pass(regularizer, z0, times, solver=model.solver, rng=TrialRNG.from_seed(2))
    host_time = _HostTime()
    solve = GridSolve(_Field(model.field, host_indexed(control, host_time), regularizer, draw), times.tolist(), method,
                      draw.spec.clock, host_time, dtype=z0.dtype)
    with host_sync_guard():
        path = solve(z0)
        model.head(path[-1]).square().sum().backward()
    grads = [p.grad for p in model.field.parameters()]
    assert path.shape == (10, 5, 6) and all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
