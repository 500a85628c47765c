"""The one place that calls torchdiffeq, torchsde and torchcde's solvers.

Every model hands its latent dynamics to :func:`integrate`, which applies the regularizer's per-pass draw
to the vector field(s) and runs the solver. Regularizers therefore never see model-specific code.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torchdiffeq
import torchsde
from ndebench.models.euler import euler_final
from ndebench.models.graphs import GRAPH_SETTINGS, GraphCache
from ndebench.regularizers.base import PassSpec, Regularizer, StepClock
from torch import nn

ODE_FIXED = ("euler", "midpoint", "heun2", "heun3", "rk4")
ODE_ADAPTIVE = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun")
SDE_METHODS = ("euler", "milstein", "srk")
# torchsde's methods whose step asks its Brownian motion for (t0, t1) alone, forward (the adjoint asks backward).
GRID_NOISE = ("euler", "milstein")
METHODS = ODE_FIXED + ODE_ADAPTIVE + tuple(m for m in SDE_METHODS if m not in ODE_FIXED)


def solver_methods(kind: Literal["ode", "sde"]) -> tuple[str, ...]:
    """The methods that solve ``kind`` dynamics: torchdiffeq's for ODEs and CDEs, torchsde's for SDEs."""
    return ODE_FIXED + ODE_ADAPTIVE if kind == "ode" else SDE_METHODS


def family_methods(family: str) -> tuple[str, ...]:
    """The methods that solve a model of ``family`` (``ode``, ``cde``, ``sde``): a CDE is solved as an ODE."""
    return solver_methods("sde" if family == "sde" else "ode")


@dataclass(frozen=True)
class SolverConfig:
    """Solver settings from the sweep config, checked once when built (``ValueError`` naming the field).

    ``method`` one of :data:`METHODS` (:func:`solver_methods` says which solve ODEs and which SDEs);
    ``step_size=None`` steps on the observation grid (for the UEA protocol, ``1/(L-1)``, i.e. the reference
    pipelines' ``max(min dt, 1e-3)`` for L <= 1001). ``rtol``/``atol`` apply to adaptive ODE solvers only.

    ``cuda_graph`` (``auto``, ``on``, ``stack`` or ``off``): on a CUDA device, capture a fixed-grid solve as a
    CUDA graph where :func:`~ndebench.models.graphs.graph_decision` allows it (``auto``: only captures compared
    with the eager pass on a GPU; ``on``: any it allows), or always solve eagerly (``off``). ``stack`` (opt-in,
    not yet verified on a GPU): a trial alone is decided as by ``auto``; a stack of trials trains each
    mini-batch as one region, its members' weights stacked (``ndebench.platform.worker.stackgraph``).

    ``max_steps`` (adaptive ODE methods only; default none) is torchdiffeq's ``max_num_steps``: the most steps,
    accepted and rejected, that one solve may take between two consecutive output times (so at most
    ``max_steps * (L - 1)`` over ``L`` observation times), in the forward solve and, with ``adjoint``, in each
    backward solve. A solve that needs more raises :class:`StepLimitError` instead of running on. Fixed-step
    methods (torchsde's SDE solvers are all fixed-step) take a known number of steps and refuse it.
    """

    method: str = "euler"
    step_size: float | None = None
    adjoint: bool = False
    rtol: float = 1e-3
    atol: float = 1e-4
    max_steps: int | None = None
    cuda_graph: str = "auto"

    def __post_init__(self) -> None:
        if self.cuda_graph not in GRAPH_SETTINGS:
            raise ValueError(f"cuda_graph={self.cuda_graph!r} is not a setting; valid: {', '.join(GRAPH_SETTINGS)}")
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r} is not a solver; valid: {', '.join(METHODS)}")
        if self.step_size is not None and not self.step_size > 0:
            raise ValueError(f"step_size={self.step_size!r} must be > 0")
        if self.method == "srk" and self.adjoint:
            raise ValueError("adjoint=True: method 'srk' has no adjoint in torchsde; use 'euler' or 'milstein' "
                             "with adjoint")
        if self.max_steps is not None:
            if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1:
                raise ValueError(f"max_steps={self.max_steps!r} must be an integer >= 1 (or null: no limit)")
            if self.method not in ODE_ADAPTIVE:
                raise ValueError(f"max_steps={self.max_steps}: a step cap applies to the adaptive methods "
                                 f"({', '.join(ODE_ADAPTIVE)}) only; method {self.method!r} takes a fixed number "
                                 "of steps")


class StepLimitError(RuntimeError):
    """An adaptive solve needed more than ``solver.max_steps`` steps between two output times."""


def step_limit(exc: BaseException, solver: SolverConfig | None, solve: str) -> StepLimitError | None:
    """``exc`` as a :class:`StepLimitError` when it is torchdiffeq's ``max_num_steps`` assertion, else ``None``.

    ``solve`` says which solve hit the cap (``forward``, or ``adjoint backward``).
    """
    if solver is None or solver.max_steps is None or "max_num_steps exceeded" not in str(exc):
        return None
    return StepLimitError(
        f"the {solver.method} {solve} solve reached solver.max_steps={solver.max_steps} steps between two output "
        "times: the dynamics are too stiff for this trial; raise solver.max_steps, loosen solver.rtol/atol or "
        "use a fixed-step method")


# Every random stream of a trial is the trial seed plus one of these offsets. They are distinct primes far
# apart, so two streams never share a generator seed, also across trials whose seeds differ by a few units
# (seed s's noise stream is not seed s + 1's regularizer stream). The regularizer stream takes the seed itself.
NOISE_SEED_OFFSET = 7919
SHUFFLE_SEED_OFFSET = 104_729
# Evaluation restarts from its own seed, so every evaluation of the same weights gives the same numbers.
EVAL_SEED_OFFSET = 1_000_003


@dataclass
class TrialRNG:
    """The generators of one trial: ``regularizer`` feeds regularizer draws, ``noise`` seeds Brownian motion,
    ``shuffle`` orders the training mini-batches.

    All are CPU generators. Regularizer draws for a model on an accelerator come from a generator on that
    device (:meth:`regularizer_on`), seeded once from ``regularizer``: the same trial seed gives the same
    draws run to run on one device, and the draw never crosses the host-device boundary.
    """

    regularizer: torch.Generator
    noise: torch.Generator
    shuffle: torch.Generator
    _on_device: dict[str, torch.Generator] = field(default_factory=dict, repr=False)
    _noise_on_device: dict[str, torch.Generator] = field(default_factory=dict, repr=False)

    @classmethod
    def from_seed(cls, seed: int) -> TrialRNG:
        """The training streams of trial seed ``seed``: regularizer ``seed``, noise and shuffle at their offsets."""
        return cls(torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + NOISE_SEED_OFFSET),
                   torch.Generator().manual_seed(seed + SHUFFLE_SEED_OFFSET))

    @classmethod
    def for_evaluation(cls, seed: int) -> TrialRNG:
        """The streams of an evaluation of trial seed ``seed``: :meth:`from_seed` of ``seed + EVAL_SEED_OFFSET``."""
        return cls.from_seed(seed + EVAL_SEED_OFFSET)

    def state(self) -> dict[str, Any]:
        """The state of every generator, device generators included (for a trial checkpoint)."""
        return {"regularizer": self.regularizer.get_state(), "noise": self.noise.get_state(),
                "shuffle": self.shuffle.get_state(),
                "on_device": {key: g.get_state() for key, g in self._on_device.items()},
                "noise_on_device": {key: g.get_state() for key, g in self._noise_on_device.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state`; a device generator is created first, then set, so nothing else is drawn, and one
        the state has not yet made is dropped (it is seeded from the restored stream at its first use, as there)."""
        for made, kept in ((self._on_device, state["on_device"]),
                           (self._noise_on_device, state.get("noise_on_device", {}))):
            for key in set(made) - set(kept):
                del made[key]
        generators = {key: self.regularizer_on(key) for key in state["on_device"]}
        noise = {key: self.noise_on(key) for key in state.get("noise_on_device", {})}
        for key, value in state["on_device"].items():
            generators[key].set_state(value)
        for key, value in state.get("noise_on_device", {}).items():
            noise[key].set_state(value)
        self.regularizer.set_state(state["regularizer"])
        self.noise.set_state(state["noise"])
        self.shuffle.set_state(state["shuffle"])

    def regularizer_on(self, device: torch.device | str) -> torch.Generator:
        """The regularizer generator for ``device``: ``regularizer`` itself on the CPU.

        One device has one stream whatever it is called: ``"cuda"``, ``torch.device("cuda")`` and ``"cuda:0"``
        (while device 0 is current) name the same generator, created and seeded on first use.
        """
        device = resolved_device(device)
        if device.type == "cpu":
            return self.regularizer
        key = str(device)
        if key not in self._on_device:
            seed = int(torch.randint(0, 2**62, (1,), generator=self.regularizer))
            self._on_device[key] = torch.Generator(device=device).manual_seed(seed)
        return self._on_device[key]


    def brownian(self, times: torch.Tensor, z0: torch.Tensor, levy: str = "none",
                 dt: float | None = None) -> torchsde.BaseBrownian:
        """The Brownian motion of one SDE solve from ``z0`` ``(B, H)`` over ``times``. With ``dt`` (a fixed-step
        solve that asks only for its steps' increments) on the CPU: a :class:`GridBrownian` whose increments on
        :func:`sde_steps` are one ``randn`` from :meth:`noise_on` (torchsde's ``BrownianInterval`` finds every
        queried interval by a Python tree search, most of a small SDE's step). Otherwise a
        ``torchsde.BrownianInterval`` whose entropy is one draw from ``noise``."""
        if dt is not None and levy == "none" and z0.device.type == "cpu":
            grid = sde_steps(times, dt)
            return GridBrownian(grid, brownian_increments(grid, z0, self.noise_on(z0.device)))
        entropy = int(torch.randint(0, 2**31 - 1, (1,), generator=self.noise))
        return torchsde.BrownianInterval(t0=float(times[0]), t1=float(times[-1]), size=z0.shape, dtype=z0.dtype,
                                         device=z0.device, entropy=entropy, levy_area_approximation=levy)

    def noise_on(self, device: torch.device | str) -> torch.Generator:
        """The Brownian-increment generator of a captured SDE solve on ``device``, seeded once from ``noise``."""
        key = str(resolved_device(device))
        if key not in self._noise_on_device:
            seed = int(torch.randint(0, 2**62, (1,), generator=self.noise))
            self._noise_on_device[key] = torch.Generator(device=key).manual_seed(seed)
        return self._noise_on_device[key]


@dataclass
class StackedRNG(TrialRNG):
    """The generators of a stack's shared solve (a batch of K members' rows, member-major): its own streams
    unused, every solve's Brownian motion the members' own (:meth:`brownian`), each drawn from ``members[k]``
    as member k's trial alone draws it, so a member's noise is its trial's."""

    members: list[TrialRNG] = field(default_factory=list)

    def brownian(self, times: torch.Tensor, z0: torch.Tensor, levy: str = "none",
                 dt: float | None = None) -> torchsde.BaseBrownian:
        """Member k's Brownian motion on its rows ``z0.chunk(K)[k]`` (:meth:`TrialRNG.brownian` of ``members[k]``);
        members' grid motions as one :class:`GridBrownian` (their increments side by side)."""
        motions = [rng.brownian(times, rows, levy, dt)
                   for rng, rows in zip(self.members, z0.chunk(len(self.members)), strict=True)]
        if all(isinstance(bm, GridBrownian) for bm in motions):
            return GridBrownian(motions[0].grid, torch.cat([bm.increments for bm in motions], dim=1))
        return StackedBrownian(motions)


class GridBrownian(torchsde.BaseBrownian):
    """A Brownian motion given by its increments ``(S, B, H)`` between the ``S + 1`` times of ``grid``, answering
    exactly those intervals (the queries of torchsde's fixed-step solve, :func:`sde_steps`): at them it has the law
    of a ``BrownianInterval``, independent ``N(0, t_{k+1} - t_k)`` increments."""

    def __init__(self, grid: list[float], increments: torch.Tensor):
        self.grid, self.increments = grid, increments
        self._step = {t: k for k, t in enumerate(grid[:-1])}

    def __call__(self, ta: Any, tb: Any = None, return_U: bool = False, return_A: bool = False) -> Any:
        k = self._step.get(float(ta))
        if k is None or tb is None or float(tb) != self.grid[k + 1] or return_U or return_A:
            raise ValueError(f"a grid Brownian motion answers its steps' increments only, not ({ta}, {tb}) "
                             f"with return_U={return_U}, return_A={return_A}")
        return self.increments[k]

    def __repr__(self) -> str:
        return f"GridBrownian({len(self.grid) - 1} steps, shape {tuple(self.shape)})"

    @property
    def dtype(self) -> torch.dtype:
        return self.increments.dtype

    @property
    def device(self) -> torch.device:
        return self.increments.device

    @property
    def shape(self) -> torch.Size:
        return self.increments.shape[1:]

    @property
    def levy_area_approximation(self) -> str:
        return "none"


class StackedBrownian(torchsde.BaseBrownian):
    """K Brownian motions ``(B_k, H)`` as one ``(sum B_k, H)``: every query asks each member's motion for the
    same interval, in member order, and concatenates the answers."""

    def __init__(self, motions: list[torchsde.BaseBrownian]):
        self.motions = motions

    def __call__(self, ta: Any, tb: Any = None, return_U: bool = False, return_A: bool = False) -> Any:
        parts = [bm(ta, tb, return_U=return_U, return_A=return_A) for bm in self.motions]
        if isinstance(parts[0], tuple):
            return tuple(None if p[0] is None else torch.cat(p) for p in zip(*parts, strict=True))
        return torch.cat(parts)

    def __repr__(self) -> str:
        return f"StackedBrownian({len(self.motions)} members, shape {tuple(self.shape)})"

    @property
    def dtype(self) -> torch.dtype:
        return self.motions[0].dtype

    @property
    def device(self) -> torch.device:
        return self.motions[0].device

    @property
    def shape(self) -> torch.Size:
        first = self.motions[0].shape
        return torch.Size((sum(bm.shape[0] for bm in self.motions), *first[1:]))

    @property
    def levy_area_approximation(self) -> str:
        return self.motions[0].levy_area_approximation


def sde_steps(times: torch.Tensor, dt: float) -> list[float]:
    """The step times of torchsde's fixed-step solve over ``times`` with step ``dt``, as it computes them: each
    the previous plus ``dt`` in the times' dtype, the last clipped to ``times[-1]`` (an eager SDE solve evaluates
    its field and asks its Brownian motion at exactly these). Remembered per (times, dt): every pass asks again."""
    host = times.detach().cpu()
    return list(_steps(host.numpy().tobytes(), host.dtype, dt))


@functools.lru_cache(maxsize=256)
def _steps(raw: bytes, dtype: torch.dtype, dt: float) -> tuple[float, ...]:
    times = torch.frombuffer(bytearray(raw), dtype=dtype)
    t, end, steps = times[0], times[-1], [float(times[0])]
    for out in times[1:]:
        while t < out:
            t = min(t + dt, end)
            steps.append(float(t))
    return tuple(steps)


def brownian_increments(grid: list[float], z0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``dW`` ``(S, B, H)`` of a Brownian motion on the step grid (``S + 1`` floats): independent
    ``N(0, t_{k+1} - t_k)`` per step, sample and component, drawn on ``z0``'s device in one call."""
    steps = torch.tensor(grid[1:], dtype=z0.dtype) - torch.tensor(grid[:-1], dtype=z0.dtype)
    noise = torch.randn(len(grid) - 1, *z0.shape, dtype=z0.dtype, device=z0.device, generator=generator)
    return noise * steps.sqrt().to(z0.device).view(-1, *([1] * z0.dim()))


def resolved_device(device: torch.device | str) -> torch.device:
    """``device`` with its index made explicit: an accelerator named without one is the current device of
    its type (``"cuda"`` -> ``cuda:<current>``); the CPU stays ``cpu``."""
    device = torch.device(device)
    if device.type == "cpu" or device.index is not None:
        return device
    current = getattr(getattr(torch, device.type, None), "current_device", None)
    return torch.device(device.type, current() if current is not None else 0)


def step_grid(t0: torch.Tensor, t1: torch.Tensor, step_size: float) -> torch.Tensor:
    """The fixed-step grid ``t0, t0 + h, ..., t1`` exactly as torchdiffeq builds it (last step may be short)."""
    n = torch.ceil((t1 - t0) / step_size + 1).item()
    grid = torch.arange(0, n, dtype=t0.dtype, device=t0.device) * step_size + t0
    grid[-1] = t1
    return grid


def moved_times(times: torch.Tensor, end: float) -> torch.Tensor:
    """The output times for an end time moved from ``times[-1]`` to ``end``, keeping the step grid.

    Observation times before ``end``, then (past ``times[-1]``) points at the mean observation spacing,
    then ``end``: a fixed-step solver stepping on the observation grid keeps its step size.
    """
    t1 = float(times[-1])
    spacing = (t1 - float(times[0])) / (times.numel() - 1)
    extra = t1 + spacing * torch.arange(1, max(math.ceil((end - t1) / spacing), 1),
                                        dtype=times.dtype, device=times.device)
    end_t = torch.tensor([end], dtype=times.dtype, device=times.device)
    return torch.cat([times[times < end], extra[extra < end], end_t])


def pass_grid(
    times: torch.Tensor, solver: SolverConfig, kind: Literal["ode", "sde"] = "ode", piecewise: bool = False
) -> torch.Tensor | None:
    """The fixed-step grid ``(S+1,)`` that a pass over ``times`` steps on; ``None`` for adaptive ODE solvers.

    With ``step_size=None`` ODE solvers step on ``times`` and SDE solvers on a uniform grid at the smallest
    spacing of ``times`` (torchsde steps uniformly). ``piecewise``: the pass is solved one interval
    ``[times[i], times[i+1]]`` per :func:`integrate` call (ODE-RNN), so the grid is the union of the
    intervals' own step grids.
    """
    if kind == "ode" and solver.method not in ODE_FIXED:
        return None
    if solver.step_size is None:
        return (times if kind == "ode" or piecewise
                else step_grid(times[0], times[-1], float((times[1:] - times[:-1]).min())))
    if piecewise:
        pieces = [step_grid(a, b, solver.step_size)[:-1] for a, b in zip(times[:-1], times[1:], strict=True)]
        return torch.cat(pieces + [times[-1:]])
    return step_grid(times[0], times[-1], solver.step_size)


def _euler_grid(times: torch.Tensor, solver: SolverConfig, output: str, device: torch.device) -> torch.Tensor | None:
    """The step grid of an ODE solve that :func:`~ndebench.models.euler.euler_final` takes over from torchdiffeq:
    Euler for ``z(T)`` without adjoint, on the CPU (not yet compared on a GPU), on a grid that strictly increases
    (then torchdiffeq reads ``z(T)`` at its last step alone); ``None`` for any other."""
    if solver.method != "euler" or solver.adjoint or output != "final" or device.type != "cpu":
        return None
    grid = pass_grid(times, solver)
    return grid if grid.numel() > 1 and bool((grid[1:] > grid[:-1]).all()) else None


def _part(regularized: slice | None, size: int) -> slice:
    start, stop, step = (regularized or slice(None)).indices(size)
    if step != 1 or stop <= start:
        raise ValueError(f"regularized={regularized!r} must be a non-empty contiguous slice "
                         f"of the {size} state components")
    return slice(start, stop)


def begin_pass(
    regularizer: Regularizer | None,
    z0: torch.Tensor,
    times: torch.Tensor,
    *,
    solver: SolverConfig,
    rng: TrialRNG,
    kind: Literal["ode", "sde"] = "ode",
    piecewise: bool = False,
    regularized: slice | None = None,
    span: tuple[float, float] | None = None,
) -> Any:
    """Draw the regularizer's randomness for one forward pass from ``z0`` ``(B, H)`` over ``[times[0], times[-1]]``.

    Returns ``None`` when no regularizer is active. :func:`integrate` calls this itself. A model that
    solves one pass in several ``integrate`` calls (ODE-RNN: one per interval between observations) calls
    it once with ``piecewise=True`` and hands the result to every call as ``draw=``, so the regularizer
    draws ONE process over the whole pass; such a model also applies the regularizer's ``end_time`` itself.
    ``regularized`` selects the sub-state the regularizer acts on (the draw has its size). ``span``: the
    pass's ``(times[0], times[-1])`` as floats when the caller holds them on the host (else read from ``times``).
    """
    if regularizer is None or not regularizer.active():
        return None
    part = _part(regularized, z0.shape[-1])
    grid = pass_grid(times, solver, kind, piecewise)
    spec = PassSpec(
        batch_size=z0.shape[0], latent_size=part.stop - part.start,
        t0=span[0] if span else float(times[0]), t1=span[1] if span else float(times[-1]),
        grid=grid, generator=rng.regularizer_on(z0.device), device=z0.device, dtype=z0.dtype,
        # torchsde accumulates its step times in the state's dtype (float32 drifts ~1e-5 over 100 steps).
        step_tol=0.0 if kind == "ode" else 1e-2 * float(grid[1] - grid[0]),
    )
    regularizer.step_clock = spec.clock
    return regularizer.draw(spec)


class _Field(nn.Module):
    def __init__(
        self, drift: nn.Module, control: Any, regularizer: Regularizer | None, draw: Any,
        control_end: float | None = None, part: slice | None = None,
    ):
        super().__init__()
        self.drift, self.control, self.regularizer, self.draw = drift, control, regularizer, draw
        self.control_end, self.part = control_end, part

    def modulate(self, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: str) -> torch.Tensor:
        if self.draw is None:
            return out
        if self.part is None:
            return self.regularizer.modulate(self.draw, t, z, out, role)
        a, b = self.part.start, self.part.stop
        inner = self.regularizer.modulate(self.draw, t, z[..., a:b], out[..., a:b], role)
        return torch.cat([out[..., :a], inner, out[..., b:]], dim=-1)

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        out = self.drift(t, z)
        if self.control is None:
            return self.modulate(t, z, out, "drift")
        dX = self.control.derivative(t)
        if self.control_end is not None:
            # beyond the data the control is held at X(T) (dX = 0) rather than extrapolating the spline
            dX = torch.where(t <= self.control_end, dX, torch.zeros_like(dX))
        if self.draw is not None and self.regularizer.control_scope == "time":
            data = (out[..., 1:] @ dX[..., 1:].unsqueeze(-1)).squeeze(-1)
            return self.modulate(t, z, out[..., 0] * dX[..., :1], "drift") + data
        return self.modulate(t, z, (out @ dX.unsqueeze(-1)).squeeze(-1), "drift")


class _SteppedField(_Field):
    """A field for torchdiffeq's fixed-grid solvers that counts steps on the pass's :class:`StepClock`.

    torchdiffeq calls ``callback_step`` before every step and, in an adjoint backward pass,
    ``callback_step_adjoint`` before every backward step. ``backward_aligned``: the backward steps retrace
    the forward grid (no ``step_size``: the grid is the output times), so they can be counted too.
    """

    def __init__(self, *args: Any, clock: StepClock, backward_aligned: bool, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.clock, self.backward_aligned = clock, backward_aligned

    def modulate(self, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: str) -> torch.Tensor:
        self.clock.step = self.clock.counted
        try:
            return super().modulate(t, z, out, role)
        finally:
            self.clock.step = None

    def callback_step(self, t0: torch.Tensor, y0: torch.Tensor, dt: torch.Tensor) -> None:
        self.clock.forward_step()

    def callback_step_adjoint(self, t0: torch.Tensor, y0: Any, dt: torch.Tensor) -> None:
        if self.backward_aligned:
            self.clock.backward_step()
        else:
            self.clock.stop()


class _ObservationGrid:
    """torchdiffeq's ``grid_constructor`` that steps on ``times`` whatever output times it is asked for."""

    def __init__(self, times: torch.Tensor):
        self.times = times

    def __call__(self, func: Any, y0: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.times.to(t)


class _SDE(nn.Module):
    noise_type = "diagonal"
    sde_type = "ito"

    def __init__(self, field: _Field, diffusion: nn.Module):
        super().__init__()
        self.field, self.diffusion = field, diffusion

    def f(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.field(t, z)

    def g(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.field.modulate(t, z, self.diffusion(t, z), "diffusion")


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
    draw: Any = None,
    regularized: slice | None = None,
    graphs: GraphCache | None = None,
) -> torch.Tensor:
    """Solve the latent dynamics from ``z0`` over ``[times[0], times[-1]]``.

    * ODE: ``dz = f(t, z) dt`` with ``drift(t, z) -> (B, H)``.
    * CDE: ``dz = f(t, z) dX(t)`` when ``control`` (a torchcde interpolation of ``X``, ``(B, L, C)``) is
      given; ``drift(t, z) -> (B, H, C)`` and the solver sees ``f(t, z) dX/dt``. The regularizer modulates
      all of it, or with ``control_scope="time"`` only the time channel's ``f_0(t, z) dX_0/dt`` (channel 0).
    * SDE (Ito, diagonal noise): ``dz = f dt + g(t, z) o dW`` when ``diffusion(t, z) -> (B, H)`` is given;
      Brownian motion is :meth:`TrialRNG.brownian`'s: on the CPU, for Euler and Milstein without adjoint, its
      increments on the step grid drawn in one call (:class:`GridBrownian`); else a ``torchsde.BrownianInterval``
      seeded from ``rng.noise``.

    If the regularizer is active it draws once from ``rng.regularizer`` for this call, may move the end
    time (``end_time``), and modulates the drift and diffusion outputs. Fixed-step ODE solvers run with
    torchdiffeq's ``perturb=True`` so each step's stages map to one step index (see ``PassSpec.step_index``).
    On the CPU an Euler solve of ``z(T)`` without adjoint is stepped by :func:`~ndebench.models.euler.euler_final`
    (torchdiffeq's steps, the same bits), which takes a regularizer's ``step_mask`` into each step's ``dt``.

    ``graphs``: the model's :class:`~ndebench.models.graphs.GraphCache` when :func:`graph_decision` captures its
    solve; a training pass (gradients on) of an ODE or CDE then replays a CUDA graph of the same steps
    (:class:`~ndebench.models.graphs.GridSolve`), the mask drawn and the control built as in the eager solve.
    An SDE's (Euler, ``output="final"``) replays Euler-Maruyama steps on :func:`pass_grid`'s grid with Brownian
    increments drawn on the device from ``rng.noise_on`` (:func:`brownian_increments`): the law of torchsde's
    Euler solve, not its random stream.

    ``draw``: a draw made by :func:`begin_pass` for a pass that spans several calls; it is used as is (no
    new draw, no end-time move). ``regularized``: a contiguous slice of the state that the regularizer
    acts on (default: all of it); outside it the field is left unmodulated, e.g. ANCDE's attention CDE.

    Shapes: ``z0`` is ``(B, H)``, ``times`` is ``(L,)``. Returns ``z(T)`` of shape ``(B, H)`` for
    ``output="final"``, or ``(L, B, H)`` at ``times`` for ``output="times"``.
    """
    kind: Literal["ode", "sde"] = "sde" if diffusion is not None else "ode"
    t0, t1 = times[0], times[-1]
    sde_dt = (solver.step_size or float((times[1:] - times[:-1]).min())) if kind == "sde" else None
    part = None if regularized is None else _part(regularized, z0.shape[-1])
    control_end = None
    if draw is None and regularizer is not None and regularizer.active():
        # a captured solve holds its times on the host already: reading them from the device would sync
        host = graphs.grid(times) if graphs is not None else [float(t0), float(t1)]
        draw = begin_pass(regularizer, z0, times, solver=solver, rng=rng, kind=kind, regularized=part,
                          span=(host[0], host[-1]))
        end = regularizer.end_time(draw, host[0], host[-1])
        if end != host[-1]:
            if output != "final":
                raise ValueError("a regularizer that moves the end time supports output='final' only")
            times = moved_times(times, end)
            control_end = host[-1] if end > host[-1] else None
    # a captured solve serves training passes; an inline one (a stack's region) serves every pass
    trains = control_end is None and (z0.requires_grad and torch.is_grad_enabled()
                                      or graphs is not None and graphs.inline)
    if (graphs is not None and kind == "ode" and trains
            and (control is None or isinstance(control, nn.Module))):
        path = graphs.solve(lambda d, x: _Field(drift, x, regularizer, d, None, part), z0, graphs.grid(times),
                            solver.method, draw, control, clock=regularizer.step_clock if draw is not None else None)
        return path[-1] if output == "final" else path
    if graphs is not None and kind == "sde" and trains and control is None and output == "final":
        clock = regularizer.step_clock if draw is not None else None
        if graphs.inline:
            # an inline solve (a stack's region on the CPU) steps as the eager one and asks each member's own
            # Brownian motion for its increments; the mask is found by time, as in the eager solve
            grid = graphs.grid(times, lambda: torch.tensor(sde_steps(times, sde_dt), dtype=torch.float64))
            bm = rng.brownian(times, z0, dt=sde_dt)
            noise, clock = torch.stack([bm(a, b) for a, b in zip(grid[:-1], grid[1:], strict=True)]), None
        else:
            grid = graphs.grid(times, lambda: pass_grid(times, solver, "sde"))
            noise = brownian_increments(grid, z0, rng.noise_on(z0.device))
        path = graphs.solve(lambda d, x: _SDE(_Field(drift, None, regularizer, d, None, part), diffusion), z0, grid,
                            solver.method, draw, None, noise, clock)
        return path[-1]
    clock = regularizer.step_clock if draw is not None else None
    grid = _euler_grid(times, solver, output, z0.device) if kind == "ode" else None
    if grid is not None:
        whole = draw is not None and part is None and (control is None or regularizer.control_scope == "increment")
        masks = regularizer.step_mask(draw) if whole else None
        field = _Field(drift, control, regularizer, draw if masks is None else None, control_end, part)
        return euler_final(field, z0, grid, clock, masks)
    if kind == "ode" and solver.method in ODE_FIXED and clock is not None:
        field: _Field = _SteppedField(drift, control, regularizer, draw, control_end, part, clock=clock,
                                      backward_aligned=solver.step_size is None)
    else:
        if clock is not None:
            clock.stop()
        field = _Field(drift, control, regularizer, draw, control_end, part)
    if kind == "ode":
        options: dict[str, Any] = {}
        if solver.method in ODE_FIXED:
            options["perturb"] = True
            if solver.step_size is not None:
                options["step_size"] = solver.step_size
        elif solver.max_steps is not None:
            options["max_num_steps"] = solver.max_steps  # odeint_adjoint copies it to the backward solves
        odeint = torchdiffeq.odeint_adjoint if solver.adjoint else torchdiffeq.odeint
        outputs = times
        if output == "final" and solver.method in ODE_FIXED and not solver.adjoint:
            # Only z(T) is wanted: ask for the two end points and keep the step grid. The steps are the same,
            # but the backward pass no longer copies the whole (L, B, H) solution once per stored time.
            outputs = times[[0, -1]]
            if solver.step_size is None:
                options["grid_constructor"] = _ObservationGrid(times)
        try:
            path = odeint(field, z0, outputs, method=solver.method, rtol=solver.rtol, atol=solver.atol,
                          options=options)
        except AssertionError as exc:
            limit = step_limit(exc, solver, "forward")
            if limit is None:
                raise
            raise limit from exc
    else:
        bm = rng.brownian(times, z0, "space-time" if solver.method == "srk" else "none",
                          dt=None if solver.adjoint or solver.method not in GRID_NOISE else sde_dt)
        sdeint = torchsde.sdeint_adjoint if solver.adjoint else torchsde.sdeint
        path = sdeint(_SDE(field, diffusion), z0, times, bm=bm, method=solver.method, dt=sde_dt)
    return path[-1] if output == "final" else path
