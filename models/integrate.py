"""The one place that calls torchdiffeq, torchsde and torchcde's solvers.

Every model hands its latent dynamics to :func:`integrate`, which applies the regularizer's per-pass draw
to the vector field(s) and runs the solver. Regularizers therefore never see model-specific code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torchdiffeq
import torchsde
from torch import nn

from ndebench.regularizers.base import PassSpec, Regularizer

ODE_FIXED = ("euler", "midpoint", "heun2", "heun3", "rk4")
ODE_ADAPTIVE = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun")
SDE_METHODS = ("euler", "milstein", "srk")


@dataclass(frozen=True)
class SolverConfig:
    """Solver settings from the sweep config.

    ``step_size=None`` steps on the observation grid (for the UEA protocol, ``1/(L-1)``, i.e. the reference
    pipelines' ``max(min dt, 1e-3)`` for L <= 1001). ``rtol``/``atol`` apply to adaptive ODE solvers only.
    """

    method: str = "euler"
    step_size: float | None = None
    adjoint: bool = False
    rtol: float = 1e-3
    atol: float = 1e-4

    def check(self, kind: Literal["ode", "sde"]) -> None:
        valid = ODE_FIXED + ODE_ADAPTIVE if kind == "ode" else SDE_METHODS
        if self.method not in valid:
            raise ValueError(f"unknown {kind.upper()} solver method {self.method!r}; valid: {', '.join(valid)}")
        if self.step_size is not None and not self.step_size > 0:
            raise ValueError(f"solver step_size={self.step_size!r} must be > 0")
        if kind == "sde" and self.method == "srk" and self.adjoint:
            raise ValueError("solver method 'srk' has no adjoint in torchsde; use 'euler' or 'milstein' with adjoint")


@dataclass
class TrialRNG:
    """The generators of one trial: ``regularizer`` feeds regularizer draws, ``noise`` seeds Brownian motion."""

    regularizer: torch.Generator
    noise: torch.Generator

    @classmethod
    def from_seed(cls, seed: int) -> "TrialRNG":
        return cls(torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 7919))


def step_grid(t0: torch.Tensor, t1: torch.Tensor, step_size: float) -> torch.Tensor:
    """The fixed-step grid ``t0, t0 + h, ..., t1`` exactly as torchdiffeq builds it (last step may be short)."""
    n = torch.ceil((t1 - t0) / step_size + 1).item()
    grid = torch.arange(0, n, dtype=t0.dtype, device=t0.device) * step_size + t0
    grid[-1] = t1
    return grid


class _Field(nn.Module):
    def __init__(self, drift: nn.Module, control: Any, regularizer: Regularizer | None, draw: Any):
        super().__init__()
        self.drift, self.control, self.regularizer, self.draw = drift, control, regularizer, draw

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        out = self.drift(t, z)
        if self.control is not None:
            out = (out @ self.control.derivative(t).unsqueeze(-1)).squeeze(-1)
        if self.draw is not None:
            out = self.regularizer.modulate(self.draw, t, z, out, "drift")
        return out


class _SDE(nn.Module):
    noise_type = "diagonal"
    sde_type = "ito"

    def __init__(self, field: _Field, diffusion: nn.Module):
        super().__init__()
        self.field, self.diffusion = field, diffusion

    def f(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.field(t, z)

    def g(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        out = self.diffusion(t, z)
        if self.field.draw is not None:
            out = self.field.regularizer.modulate(self.field.draw, t, z, out, "diffusion")
        return out


def integrate(
    drift: nn.Module,
    z0: torch.Tensor,
    times: torch.Tensor,
    *,
    solver: SolverConfig,
    rng: TrialRNG,
    control: Any = None,
    diffusion: nn.Module | None = None,
    regularizer: Regularizer | None = None,
    output: Literal["final", "times"] = "final",
) -> torch.Tensor:
    """Solve the latent dynamics from ``z0`` over ``[times[0], times[-1]]``.

    * ODE: ``dz = f(t, z) dt`` with ``drift(t, z) -> (B, H)``.
    * CDE: ``dz = f(t, z) dX(t)`` when ``control`` (a torchcde interpolation of ``X``, ``(B, L, C)``) is
      given; ``drift(t, z) -> (B, H, C)`` and the solver sees ``f(t, z) dX/dt``.
    * SDE (Ito, diagonal noise): ``dz = f dt + g(t, z) o dW`` when ``diffusion(t, z) -> (B, H)`` is given;
      Brownian motion is a ``torchsde.BrownianInterval`` seeded from ``rng.noise``.

    If the regularizer is active it draws once from ``rng.regularizer`` for this call, may move the end
    time (``end_time``), and modulates the drift and diffusion outputs. Fixed-step ODE solvers run with
    torchdiffeq's ``perturb=True`` so each step's stages map to one step index (see ``PassSpec.step_index``).

    Shapes: ``z0`` is ``(B, H)``, ``times`` is ``(L,)``. Returns ``z(T)`` of shape ``(B, H)`` for
    ``output="final"``, or ``(L, B, H)`` at ``times`` for ``output="times"``.
    """
    kind: Literal["ode", "sde"] = "sde" if diffusion is not None else "ode"
    solver.check(kind)
    t0, t1 = times[0], times[-1]
    fixed = kind == "sde" or solver.method in ODE_FIXED
    draw = None
    if regularizer is not None and regularizer.active():
        grid = None
        if fixed:
            grid = times if solver.step_size is None else step_grid(t0, t1, solver.step_size)
            if kind == "sde" and solver.step_size is None:
                grid = step_grid(t0, t1, float((times[1:] - times[:-1]).min()))
        spec = PassSpec(
            batch_size=z0.shape[0], latent_size=z0.shape[1], t0=float(t0), t1=float(t1), grid=grid,
            generator=rng.regularizer, device=z0.device, dtype=z0.dtype,
            step_tol=0.0 if kind == "ode" else 1e-6 * float(grid[1] - grid[0]),
        )
        draw = regularizer.draw(spec)
        end = regularizer.end_time(draw, float(t0), float(t1))
        if end != float(t1):
            if output != "final":
                raise ValueError("a regularizer that moves the end time supports output='final' only")
            times = torch.stack([t0, torch.as_tensor(end, dtype=times.dtype, device=times.device)])
    field = _Field(drift, control, regularizer, draw)
    if kind == "ode":
        options: dict[str, Any] = {}
        if solver.method in ODE_FIXED:
            options["perturb"] = True
            if solver.step_size is not None:
                options["step_size"] = solver.step_size
        odeint = torchdiffeq.odeint_adjoint if solver.adjoint else torchdiffeq.odeint
        path = odeint(field, z0, times, method=solver.method, rtol=solver.rtol, atol=solver.atol, options=options)
    else:
        dt = solver.step_size or float((times[1:] - times[:-1]).min())
        entropy = int(torch.randint(0, 2**31 - 1, (1,), generator=rng.noise))
        levy = "space-time" if solver.method == "srk" else "none"
        bm = torchsde.BrownianInterval(
            t0=float(times[0]), t1=float(times[-1]), size=z0.shape, dtype=z0.dtype, device=z0.device,
            entropy=entropy, levy_area_approximation=levy,
        )
        sdeint = torchsde.sdeint_adjoint if solver.adjoint else torchsde.sdeint
        path = sdeint(_SDE(field, diffusion), z0, times, bm=bm, method=solver.method, dt=dt)
    return path[-1] if output == "final" else path
