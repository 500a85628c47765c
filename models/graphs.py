"""Fixed-grid solves captured as CUDA graphs: one launch per pass instead of thousands of tiny kernels.

:func:`graph_decision` says, as a pure function of the settings, whether a model's solve is captured
(``"captured"``) or runs eagerly (``"eager: <reason>"``); the trial records that line on its MLflow run
(tag ``ndebench.graph``), so a fallback is never silent. :class:`GraphCache` holds the captured solves of one
model, one per input shape: the solve ``z(t_{k+1}) = z(t_k) + step(f, t_k, dt_k, z(t_k))`` on the data's own
grid, forward and backward, through ``torch.cuda.make_graphed_callables``. The regularizer's mask is drawn
eagerly for every pass and, with a CDE's control path, copied into the graph's static buffers before the
replay, so each pass sees a fresh mask from the trial's generator: the same draws, in the same order, as
the eager solve. The capture code is :class:`GridSolve` (the steps) and :meth:`GraphCache.solve`.

``auto`` captures only a (model, method) whose captured pass was compared with the eager one on a real GPU
(the model class's own ``graph_verified``, which names the run); ``on`` captures any solve the decision allows.
A capture that fails leaves the process as it found it (:func:`end_failed_capture`) and the model runs eagerly.
"""
from __future__ import annotations

import bisect
import contextlib
import copy
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

GRAPH_METHODS = ("euler", "midpoint", "rk4")
GRAPH_SETTINGS = ("auto", "on", "stack", "off")
CAPTURED = "captured"


def graph_decision(*, setting: str, device: torch.device | str, method: str, adjoint: bool,
                   step_size: float | None, kind: str, model_blocker: str | None,
                   regularizer_blocker: str | None, verified: tuple[str, ...] = ()) -> str:
    """``"captured"`` or ``"eager: <reason>"`` for a solve with these settings (the first reason that applies).

    ``setting`` is ``solver.cuda_graph`` (``stack`` decides a lone solve as ``auto``); ``kind`` ``"ode"`` or
    ``"sde"``; ``model_blocker`` and ``regularizer_blocker`` are the model's and the regularizer's own reasons
    (``None``: capturable); ``verified`` the methods whose capture of this model was checked against the eager
    pass on a GPU, the only ones ``auto`` captures.
    """
    if setting == "off":
        return "eager: solver.cuda_graph=off"
    if torch.device(device).type != "cuda":
        return f"eager: device {torch.device(device).type} (graphs are captured on CUDA only)"
    if kind == "sde" and method != "euler":
        return (f"eager: SDE method {method!r} is not captured (captured: euler, Euler-Maruyama with Brownian "
                "increments drawn on the device)")
    if method not in GRAPH_METHODS:
        return f"eager: method {method!r} is not captured (captured: {', '.join(GRAPH_METHODS)})"
    if adjoint:
        return "eager: the adjoint solves its backward pass step by step on the host"
    if step_size is not None:
        return f"eager: solver.step_size={step_size:g} (the capture steps on the data's own grid)"
    if model_blocker or regularizer_blocker:
        return f"eager: {model_blocker or regularizer_blocker}"
    if setting in ("auto", "stack") and method not in verified:
        return (f"eager: its {method} capture has not been compared with the eager pass on a GPU yet "
                "(solver.cuda_graph: on captures it)")
    return CAPTURED


def _step(method: str, f: Callable[[float, torch.Tensor], torch.Tensor], t0: float, t1: float,
          ends: tuple[float, float], z: torch.Tensor) -> torch.Tensor:
    """One step of torchdiffeq's fixed-grid method (its RK4 is the 3/8 rule) from ``z`` ``(B, H)`` over
    ``[t0, t1]``; ``ends`` are ``t0`` just after and ``t1`` just before, where torchdiffeq's ``perturb=True``
    evaluates the first and last stages (so a control path's piece is the step's own, also at its knots)."""
    dt = t1 - t0
    k1 = f(ends[0], z)
    if method == "euler":
        return z + dt * k1
    if method == "midpoint":
        return z + dt * f(t0 + 0.5 * dt, z + k1 * (0.5 * dt))
    k2 = f(t0 + dt / 3, z + dt * k1 / 3)
    k3 = f(t0 + 2 * dt / 3, z + dt * (k2 - k1 / 3))
    k4 = f(ends[1], z + dt * (k1 - k2 + k3))
    return z + (k1 + 3 * (k2 + k3) + k4) * dt * 0.125


def _perturbed_ends(grid: list[float], dtype: torch.dtype) -> list[tuple[float, float]]:
    """Per step ``(nextafter(t_k, +inf), nextafter(t_{k+1}, -inf))`` in ``dtype``, as torchdiffeq perturbs."""
    points = torch.tensor(grid, dtype=dtype)
    after = torch.nextafter(points, torch.tensor(math.inf, dtype=dtype)).tolist()
    before = torch.nextafter(points, torch.tensor(-math.inf, dtype=dtype)).tolist()
    return list(zip(after[:-1], before[1:], strict=True))


@functools.lru_cache(maxsize=64)
def _schedule(grid: tuple[float, ...], method: str, dtype: torch.dtype
              ) -> tuple[list[tuple[float, float]], dict[float, float]]:
    """:class:`GridSolve`'s host side, computed once per grid: the perturbed ends of each step and every stage
    time rounded to ``dtype`` (what the host-indexed control path looks its piece up by), so the forward pass
    reads no tensor on the host."""
    ends = _perturbed_ends(list(grid), dtype)
    stages: list[float] = []
    for k, pair in enumerate(ends):
        _step(method, lambda t, y: stages.append(t) or 0.0, grid[k], grid[k + 1], pair, 0.0)
    return ends, dict(zip(stages, torch.tensor(stages, dtype=dtype).tolist(), strict=True))


class GridSolve(nn.Module):
    """``z0`` ``(B, H)`` -> the path ``(S+1, B, H)`` on ``grid`` (Python floats), stepping ``field`` with
    ``method``; ``clock.step`` is set to ``k`` while step ``k`` evaluates the field, so the mask is looked up by
    counted step, with no search and no host synchronisation. Everything it does can be captured.

    With ``noise`` ``(S, B, H)`` the field is an Ito SDE with diagonal noise (``field.f``, ``field.g``) and the
    step is Euler-Maruyama, ``z_{k+1} = z_k + f(t_k, z_k) dt_k + g(t_k, z_k) * dW_k``, ``dW_k = noise[k]``.
    ``dtype`` is ``z0``'s: the perturbed stage times and the host's copy of each are rounded to it here, so the
    forward pass reads nothing from a tensor on the host (it passes :func:`host_sync_guard`)."""

    def __init__(self, field: nn.Module, grid: list[float], method: str, clock: Any, host_time: Any = None,
                 noise: torch.Tensor | None = None, *, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.field, self.grid, self.method, self.clock, self.host_time = field, grid, method, clock, host_time
        self.noise = noise
        self.ends, self.host_times = _schedule(tuple(grid), method, dtype)

    def forward(self, z0: torch.Tensor) -> torch.Tensor:
        def f(t: float, y: torch.Tensor) -> torch.Tensor:
            time = z0.new_full((), t)
            if self.host_time is not None:
                self.host_time.t = self.host_times[t]
            return self.field(time, y)

        path, z = [z0], z0
        for k, ends in enumerate(self.ends):
            if self.clock is not None:
                self.clock.step = k
            if self.noise is None:
                z = _step(self.method, f, self.grid[k], self.grid[k + 1], ends, z)
            else:
                t = z0.new_full((), self.grid[k])
                z = z + (self.grid[k + 1] - self.grid[k]) * self.field.f(t, z) + self.field.g(t, z) * self.noise[k]
            path.append(z)
        if self.clock is not None:
            self.clock.step = None
        return torch.stack(path)


class HostSyncError(RuntimeError):
    """An operation in a region meant for capture synchronises with the host or has a data-dependent shape."""


_HOST_READS = frozenset(("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
                         "__complex__"))
_DYNAMIC_OPS = frozenset((
    "aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique_dim", "aten._unique",
    "aten._unique2", "aten.unique_consecutive", "aten.unique_dim_consecutive", "aten.equal", "aten.is_nonzero",
    "aten.allclose"))


def _refusal(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """Why a capture would refuse this aten call (``None``: it would not)."""
    name = str(func.overloadpacket)
    if name in _DYNAMIC_OPS:
        return "has a data-dependent output shape or reads a device value on the host"
    if name == "aten.repeat_interleave" and kwargs.get("output_size") is None and not (
            len(args) > 3 and args[3] is not None):
        return "without output_size sums its repeats on the host"
    if name in ("aten.index", "aten.index_put", "aten.index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in (args[1] or ())):
        return "with a boolean mask has a data-dependent output shape"
    if name in ("aten._to_copy", "aten.copy_"):
        source = args[1] if name == "aten.copy_" else args[0]
        target = args[0].device if name == "aten.copy_" else kwargs.get("device")
        if target is not None and torch.device(target).type != torch.device(source.device).type:
            return f"copies between {source.device.type} and {torch.device(target).type}"
    return None


class _FunctionGuard(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__qualname__", "")
        if name.startswith("Tensor") and getattr(func, "__name__", "") in _HOST_READS:
            raise HostSyncError(f"Tensor.{func.__name__} reads a tensor on the host (a CUDA graph cannot replay it)")
        return func(*args, **(kwargs or {}))


class _DispatchGuard(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        why = _refusal(func, args, kwargs)
        if why is not None:
            raise HostSyncError(f"{func} {why} (a CUDA graph cannot replay it)")
        return func(*args, **kwargs)


@contextlib.contextmanager
def host_sync_guard() -> Iterator[None]:
    """Raise :class:`HostSyncError` on any operation in the block that a CUDA graph could not hold: a tensor
    read on the host (``.item()``, ``.tolist()``, ``.cpu()``, ``bool(t)``, ...), an aten operation whose output
    shape depends on the data (``nonzero``, ``masked_select``, ``unique``, boolean indexing,
    ``repeat_interleave`` without ``output_size``) or that copies between the device and the host.

    It runs on any device, so a region meant for capture is checked by the CPU suite: what passes here
    launches no host synchronisation when captured (CUDA's own refusals, e.g. a non-graph-safe generator,
    are the GPU suite's)."""
    with _FunctionGuard(), _DispatchGuard():
        yield


class CaptureError(RuntimeError):
    """A solve that :func:`graph_decision` let through could not be captured; the model falls back to eager."""


class _HostTime:
    """The time of the stage being captured, as a Python float (set by :class:`GridSolve` before each stage)."""

    t: float = 0.0


def host_indexed(control: nn.Module, host_time: _HostTime, knots: list[float] | None = None) -> nn.Module:
    """``control`` (a torchcde interpolation) with its piece found on the host, so its ``derivative`` can be captured.

    torchcde finds the piece of ``t`` with ``bucketize`` on the device and indexes with that tensor, a host
    synchronisation that CUDA-graph capture refuses. On a fixed grid each stage's time is known on the host:
    the piece ``i = clamp(bisect_left(knots, t) - 1, 0, L - 2)`` is the same one (``bucketize`` is
    ``bisect_left``), and the fractional part ``t - knots[i]`` is computed on the device as torchcde does, so
    the derivative is the same to the bit. ``knots``: ``control._t`` as floats when the caller has them (read
    from the device otherwise). Raises :class:`CaptureError` for a control without knots.
    """
    if not callable(getattr(control, "_interpret_t", None)) or not isinstance(getattr(control, "_t", None),
                                                                              torch.Tensor):
        raise CaptureError(f"the control path {type(control).__name__} has no knots to index on the host")
    knots = control._t.tolist() if knots is None else knots

    def interpret(t: torch.Tensor) -> tuple[torch.Tensor, int]:
        index = min(max(bisect.bisect_left(knots, host_time.t) - 1, 0), len(knots) - 2)
        return t - control._t[index], index

    control._interpret_t = interpret
    return control


def at_first_knot(control: nn.Module) -> torch.Tensor:
    """``X(t_0)`` of a torchcde interpolation, its piece (the first) known on the host: torchcde's own
    ``evaluate`` at its first knot to the bit, without the device-tensor index (a host synchronisation) that
    its piece search ends in."""
    search = control._interpret_t
    control._interpret_t = lambda t: (t - control._t[0], 0)
    try:
        return control.evaluate(control._t[0])
    finally:
        control._interpret_t = search


def end_failed_capture(device: torch.device) -> None:
    """Leave the process as a failed capture found it.

    A capture that fails midway (an operation CUDA refuses while a stream captures) leaves torch's default CUDA
    generator marked as capturing, and every later random draw on the device then raises "Offset increment
    outside graph capture encountered unexpectedly" (seen on an H100 with torch 2.11). One small capture that
    ends normally clears the mark; the caller restores the generator's state around the attempt.
    """
    with torch.cuda.device(device):
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.nn.functional.dropout(torch.ones(1, device=device), 0.5)
        torch.cuda.synchronize()


class _Entry:
    def __init__(self, solve: Callable[[torch.Tensor], torch.Tensor], masks: torch.Tensor | None,
                 control: nn.Module | None, noise: torch.Tensor | None):
        self.solve, self.masks, self.noise = solve, masks, noise
        self.control = None if control is None else dict(control.named_buffers())

    def stage(self, draw: Any, control: nn.Module | None, noise: torch.Tensor | None) -> None:
        """Copy this pass's mask, control path and Brownian increments into the buffers the captured graph reads."""
        if self.masks is not None:
            self.masks.copy_(draw.step_masks)
        if self.noise is not None:
            self.noise.copy_(noise)
        if self.control is not None:
            for name, buffer in control.named_buffers():
                self.control[name].copy_(buffer)


class GraphCache:
    """The captured solves of one model, keyed by the shape, dtype and grad mode of ``z0``.

    ``inline``: capture nothing here; :meth:`solve` runs the same :class:`GridSolve` steps directly, reading the
    pass's own mask and control path (a stack's region, captured whole on CUDA by its caller and run eagerly
    on the CPU, holds the solve this way)."""

    def __init__(self, inline: bool = False) -> None:
        self.inline = inline
        self.entries: dict[tuple[Any, ...], _Entry] = {}
        self._grids: dict[tuple[int, int, bool], list[float]] = {}

    def grid(self, times: torch.Tensor, make: Callable[[], torch.Tensor] | None = None) -> list[float]:
        """``times`` (or the grid ``make()`` builds from them) as Python floats, read from the device once per
        buffer (later passes need no sync)."""
        key = (times.data_ptr(), times.numel(), make is None)
        if key not in self._grids:
            self._grids[key] = (times if make is None else make()).tolist()
        return self._grids[key]

    def solve(self, make_field: Callable[[Any, Any], nn.Module], z0: torch.Tensor, grid: list[float], method: str,
              draw: Any, control: nn.Module | None = None, noise: torch.Tensor | None = None, clock: Any = None
              ) -> torch.Tensor:
        """The path ``(S+1, B, H)`` from ``z0``; ``make_field(draw, control)`` builds the field that reads them.

        The first call for a shape captures: ``draw``'s mask and the ``control`` path (a torchcde interpolation,
        whose coefficients are module buffers), cloned, become the graph's static buffers. Later calls copy
        their own mask and control into those buffers and replay. ``noise`` ``(S, B, H)``: the pass's Brownian
        increments of an SDE (``make_field`` then builds an object with ``f`` and ``g``), staged the same way.
        ``clock``: the regularizer's step clock of the pass (``None`` without a draw).
        Raises :class:`CaptureError` when the capture fails.
        """
        if self.inline:
            host_time = None if control is None else _HostTime()
            live = None if control is None else host_indexed(control, host_time, self.grid(control._t))
            return GridSolve(make_field(draw, live), grid, method, clock, host_time, noise, dtype=z0.dtype)(z0)
        shapes = None if control is None else tuple((n, tuple(b.shape)) for n, b in control.named_buffers())
        key = (tuple(z0.shape), z0.dtype, z0.device, z0.requires_grad, len(grid), draw is None, shapes,
               noise is None)
        entry = self.entries.get(key)
        if entry is None:
            static = None if draw is None else dataclasses.replace(draw, step_masks=draw.step_masks.clone())
            static_control = None if control is None else copy.deepcopy(control)
            host_time = None if control is None else _HostTime()
            field_control = None if control is None else host_indexed(static_control, host_time)
            static_noise = None if noise is None else noise.clone()
            module = GridSolve(make_field(static, field_control), grid, method, clock, host_time, static_noise,
                               dtype=z0.dtype)
            sample = z0.detach().clone().requires_grad_(z0.requires_grad)
            on_gpu = z0.device.type == "cuda"
            state = torch.cuda.get_rng_state(z0.device) if on_gpu else None
            try:
                graphed = torch.cuda.make_graphed_callables(module, (sample,))
            except (RuntimeError, AssertionError, TypeError) as exc:
                if on_gpu:
                    end_failed_capture(z0.device)
                    torch.cuda.set_rng_state(state, z0.device)
                raise CaptureError(f"{type(exc).__name__}: {exc}".splitlines()[0][:300]) from exc
            entry = _Entry(graphed, None if static is None else static.step_masks, static_control, static_noise)
            self.entries[key] = entry
        entry.stage(draw, control, noise)
        return entry.solve(z0)
