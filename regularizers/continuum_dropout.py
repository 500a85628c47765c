"""Continuum Dropout (Lee et al., AAAI 2026): an alternating-renewal on/off mask on the latent dynamics."""
from __future__ import annotations

import concurrent.futures
import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from ndebench.regularizers import checks
from ndebench.regularizers.base import ControlScope, PassSpec, Regularizer, Role
from ndebench.regularizers.rates import Rates, dropout_rate, expected_renewals, solve_rates
from ndebench.regularizers.registry import HyperParam, register_regularizer
from scipy.optimize import brentq


@dataclass
class RenewalPaths:
    """Switching times of ``(B, H)`` independent alternating renewal processes that start active at ``t0``.

    ``switches`` has shape ``(B, H, K)``: ``switches[..., j]`` is ``t0 + S_{j+1}``, the (j+1)-th switch, where
    odd-numbered switches (``S_1, S_3, ...``) start an inactive period and even-numbered ones end it. Every
    row's last switch lies beyond the horizon (rows that needed fewer switches end in ``+inf``), so
    ``indicator`` is exact on ``[t0, t1]``. Times ``t`` may come on any device: results are on the device of
    ``switches``.
    """

    switches: torch.Tensor
    t0: float

    def _count(self, t: torch.Tensor) -> torch.Tensor:
        t = t.to(device=self.switches.device, dtype=self.switches.dtype)
        flat = t.reshape(1, 1, -1).expand(*self.switches.shape[:2], -1).contiguous()
        counts = torch.searchsorted(self.switches, flat, right=True).permute(2, 0, 1)
        return counts.reshape(*t.shape, *counts.shape[1:])

    def indicator(self, t: torch.Tensor) -> torch.Tensor:
        """``I(t)`` of shape ``(*t.shape, B, H)``: 1 while active, 0 while inactive
        (active on ``[S_{2n}, S_{2n+1})``)."""
        return (self._count(t) % 2 == 0).to(self.switches.dtype)

    def renewals(self, t: torch.Tensor) -> torch.Tensor:
        """``N(t)`` of shape ``(*t.shape, B, H)``: completed active+inactive cycles by time ``t``."""
        return self._count(t) // 2

    def active_time(self, t: torch.Tensor) -> torch.Tensor:
        """``int_{t0}^{t} I(s) ds`` of shape ``(B, H)`` for a scalar ``t``, exact from the switching times."""
        t = t.to(device=self.switches.device, dtype=self.switches.dtype)
        edges = torch.cat([torch.full_like(self.switches[..., :1], self.t0), self.switches], dim=-1).clamp(max=t)
        lengths = edges[..., 1:] - edges[..., :-1]
        return lengths[..., 0::2].sum(-1)


# On the CPU the paths a first chunk of switches leaves short of the horizon get further chunks, each short
# again with probability at most _TOP_UP_TAIL (exact: no truncation). On an accelerator, where that check would
# synchronise with the host, the first chunk is the whole draw: a path is truncated with probability at most
# _DEVICE_TAIL.
_TOP_UP_TAIL = 1e-6
_DEVICE_TAIL = 2.0**-40


@functools.lru_cache(maxsize=1024)
def switch_bound(rates: Rates, horizon: float, tail: float) -> int:
    """The smallest even ``K`` with ``P(S_K <= horizon) <= tail``: ``K`` switches pass ``horizon`` but for ``tail``.

    ``S_K`` is the sum of ``K/2`` Exp(lambda1) and ``K/2`` Exp(lambda2) periods (whichever comes first).
    Chernoff: ``P(S_K <= T) <= min_{theta > 0} e^{theta T} (1 + theta/lambda1)^{-K/2} (1 + theta/lambda2)^{-K/2}``;
    the minimiser solves ``T = K/2 (1/(lambda1 + theta) + 1/(lambda2 + theta))``.
    """
    l1, l2, log_tail = rates.lambda1, rates.lambda2, math.log(tail)

    def small_enough(n: int) -> bool:
        if n / l1 + n / l2 <= horizon:
            return False
        theta = brentq(lambda th: horizon - n / (l1 + th) - n / (l2 + th), 0.0, 2.0 * n / horizon)
        return theta * horizon - n * (math.log1p(theta / l1) + math.log1p(theta / l2)) <= log_tail

    high = max(1, math.ceil(horizon / (1.0 / l1 + 1.0 / l2)))
    while not small_enough(high):
        high *= 2
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if small_enough(mid) else (mid, high)
    return 2 * high


def _durations(rows: int, count: int, rates: Rates, unit: float, generator: torch.Generator) -> torch.Tensor:
    """``(rows, count)`` float64 periods in units of ``unit``, alternating Exp(lambda1) and Exp(lambda2) from an
    active start (``count`` even). Each is ``-log(U) / lambda`` of one 32-bit uniform lane ``U = (x + 2^31 +
    1/2) 2^-32`` in ``(0, 1)`` (``x`` the lane as a signed integer): the resolution of the per-step
    probabilities of the grid sampler it replaced."""
    lanes = random_words(rows * count // 2, generator, scratch=True).view(torch.int32)
    logs = lanes.to(torch.float64).add_(2.0**31 + 0.5).log_().view(rows, count // 2, 2)
    scale = torch.tensor([1.0 / rates.lambda1, 1.0 / rates.lambda2], dtype=torch.float64, device=logs.device) / unit
    # -log(U) / lambda = (32 log 2 - log(x + 2^31 + 1/2)) / lambda
    return torch.addcmul(scale * (32.0 * math.log(2.0)), logs, scale, value=-1.0).view(rows, count)


def _first_chunk(rates: Rates, horizon: float) -> int:
    """An even number of switches that covers ``horizon`` for most paths (about one in six falls short): the
    mean ``2 m + p`` plus one standard deviation of a count of ``m`` cycles with the cycle's squared coefficient
    of variation. Only the cost of a draw depends on it, not its law."""
    l1, l2 = rates.lambda1, rates.lambda2
    m, p = expected_renewals(l1, l2, horizon), dropout_rate(l1, l2, horizon)
    variation = (l1**-2 + l2**-2) / (1.0 / l1 + 1.0 / l2) ** 2
    return 2 * math.ceil((2.0 * m + p + 2.0 * math.sqrt(m * variation) + 1.0) / 2.0)


def _switch_chunks(rows: int, rates: Rates, horizon: float, unit: float, generator: torch.Generator,
                   exact: bool) -> Iterator[tuple[torch.Tensor | None, torch.Tensor]]:
    """Switching times ``(n, k)``, measured from the start in units of ``unit``, of ``rows`` paths, chunk by chunk.

    The first chunk ``(None, times)`` holds the first ``k`` switches of every path; while ``exact`` and some
    paths are still short of ``horizon``, further chunks ``(index, times)`` continue those paths (``index``
    their rows). Every chunk has an even width, so a column's parity is its switches' parity.
    """
    first = _first_chunk(rates, horizon) if exact else switch_bound(rates, horizon, _DEVICE_TAIL)
    times = _durations(rows, first, rates, unit, generator).cumsum_(-1)
    yield None, times
    end = horizon / unit
    last = times[:, -1]
    short = torch.nonzero(last <= end).squeeze(1) if exact else last[:0].long()
    last = last[short]
    while short.numel():
        remaining = max(end - float(last.min()), end * 2.0**-30)
        left = horizon * 2.0 ** math.ceil(math.log2(remaining / end))  # few distinct bounds to cache
        more = _durations(short.numel(), switch_bound(rates, left, _TOP_UP_TAIL), rates, unit, generator)
        more = more.cumsum_(-1).add_(last.unsqueeze(1))
        yield short, more
        keep = more[:, -1] <= end
        short, last = short[keep], more[keep, -1]


def sample_renewal_paths(
    batch_size: int,
    latent_size: int,
    rates: Rates,
    t0: float,
    t1: float,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> RenewalPaths:
    """Draw alternating Exp(lambda1) active / Exp(lambda2) inactive periods until every path passes ``t1``.

    A first chunk of switches per path is sized by a Chernoff bound (:func:`switch_bound`) so that few paths
    fall short of ``t1``; those get further chunks until they pass it, so there is no truncation. Drawn in
    float64 from the generator's device and returned on ``device`` (default: the generator's) in ``dtype``.
    Used for adaptive solvers, the occupancy mask and figures; the left-endpoint grid mask uses
    :func:`sample_grid_states`.
    """
    rows = batch_size * latent_size
    chunks = list(_switch_chunks(rows, rates, t1 - t0, 1.0, generator, exact=True))
    switches = chunks[0][1]
    if len(chunks) > 1:
        widths = [times.shape[1] for _, times in chunks]
        switches = torch.cat([switches, switches.new_full((rows, sum(widths[1:])), math.inf)], dim=1)
        for (index, times), start in zip(chunks[1:], itertools.accumulate(widths), strict=False):
            switches[index, start:start + times.shape[1]] = times
    switches = (switches + t0).to(device=generator.device if device is None else device, dtype=dtype)
    return RenewalPaths(switches=switches.view(batch_size, latent_size, -1), t0=t0)


_PARALLEL_WORDS = 2**16
_CAST_AT_DRAW = 2**22
_CHUNKS = 8
_pools: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_scratch: dict[str, torch.Tensor] = {}


def random_words(count: int, generator: torch.Generator, *, scratch: bool = False) -> torch.Tensor:
    """``count`` uniform 64-bit words (int64) on the generator's device.

    On a CPU with several torch threads, large draws are split into ``_CHUNKS`` chunks filled in parallel
    (torch's CPU generator is serial), each from a generator seeded from ``generator``. The chunking does
    not depend on the thread count, so the words depend only on the seed and ``count``. ``scratch``: the
    words live in a CPU buffer kept for the next call (a fresh buffer of this size costs more in page
    faults than the draw itself); the caller must be done with them before the next call.
    """
    device = generator.device
    if scratch and device.type == "cpu":
        if _scratch.get("words") is None or _scratch["words"].numel() < count:
            _scratch["words"] = torch.empty(count, dtype=torch.int64)
        words = _scratch["words"][:count]
    else:
        words = torch.empty(count, dtype=torch.int64, device=device)
    if device.type != "cpu" or count < _PARALLEL_WORDS:
        return words.random_(-(2**63), None, generator=generator)
    seeds = torch.randint(0, 2**62, (_CHUNKS,), generator=generator).tolist()

    def fill(job: tuple[torch.Tensor, int]) -> None:
        job[0].random_(-(2**63), None, generator=torch.Generator().manual_seed(job[1]))

    # chunk() may return fewer than _CHUNKS pieces (7 for 49 words); the spare seeds go unused.
    jobs = list(zip(words.chunk(_CHUNKS), seeds, strict=False))
    threads = torch.get_num_threads()
    if threads == 1:
        for job in jobs:
            fill(job)
    else:
        if threads not in _pools:
            _pools[threads] = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="ndebench-rng")
        list(_pools[threads].map(fill, jobs))
    return words


def sample_grid_states(
    points: torch.Tensor,
    batch_size: int,
    latent_size: int,
    rates: Rates,
    generator: torch.Generator,
    dtype: torch.dtype = torch.bool,
    span: tuple[float, float] | None = None,
) -> torch.Tensor:
    """The indicator ``I(points[k])`` ``(K, B, H)`` of ``(B, H)`` processes that start active at ``points[0]``.

    The same process as :func:`sample_renewal_paths`, observed on the grid: each path's switching times are
    drawn (about ``2 m`` random 32-bit lanes per path rather than one per grid point) and switch ``j``
    (0-based; even ``j`` turns the path off, odd ``j`` on) changes ``I`` at every grid point at or after it, so
    ``I(t_k) = 1 + sum_{j: S_j <= t_k} (-1)^(j+1)``. Each switch adds its sign to the first grid point at or
    after it (one scatter; a last row collects the switches past the grid) and a cumulative sum over the grid
    gives the masks, in ``dtype`` (bool, or a float dtype for masks the field multiplies by).

    A switch is located by arithmetic in units of the grid's step when the grid is uniform to within a
    quarter step (``linspace`` grids in float32 are), and exactly by binary search when it falls within the
    grid's deviation from uniform of a grid point, on other grids, and on accelerators. ``span`` is
    ``(points[0], end)`` with ``end >= points[-1]`` as Python floats (read from ``points`` when omitted);
    everything runs on the generator's device, on an accelerator without host synchronisation.
    """
    device, count, rows = generator.device, points.numel(), batch_size * latent_size
    t0, t_end = span if span is not None else (float(points[0]), float(points[-1]))
    on_cpu = device.type == "cpu"
    grid = points.to(device=device, dtype=torch.float64)
    step, slack = _uniform_step(grid) if on_cpu and count > 1 else (None, 0.0)
    work = torch.int8 if on_cpu else (dtype if dtype.is_floating_point else torch.float32)
    cells = torch.zeros(count + 1, rows, dtype=work, device=device)
    if count > 1:
        for index, times in _switch_chunks(rows, rates, t_end - t0, step or 1.0, generator, exact=on_cpu):
            row = torch.arange(rows, device=device) if index is None else index
            flat = _cells(times, grid, t0, step, slack, rows, row.to(torch.float64).unsqueeze(1))
            sign = torch.tensor([-1, 1], dtype=work, device=device).repeat(flat.numel() // 2)
            cells.view(-1).scatter_add_(0, flat.view(-1), sign)
    cells[0] = 1
    if not on_cpu:
        masks = cells[:count].cumsum(0, dtype=work)
        return masks.view(count, batch_size, latent_size).to(dtype)
    masks = torch.empty(count, rows, dtype=dtype if dtype.is_floating_point else torch.int8)
    masks[0] = 1
    for k in range(1, count):  # a loop over rows of the grid: torch's cumsum over dim 0 is several times slower
        torch.add(masks[k - 1], cells[k], out=masks[k])
    masks = masks.view(count, batch_size, latent_size)
    return masks if dtype.is_floating_point else masks.view(torch.bool)


def _uniform_step(grid: torch.Tensor) -> tuple[float | None, float]:
    """``(h, slack)`` for a grid within ``slack`` steps of ``grid[0] + k h``; ``(None, 0)`` if not within 1/4."""
    count = grid.numel()
    step = float(grid[-1] - grid[0]) / (count - 1)
    if step <= 0.0:
        return None, 0.0
    ideal = grid[0] + step * torch.arange(count, dtype=torch.float64, device=grid.device)
    slack = float((grid - ideal).abs().max()) / step
    return (step, slack) if slack < 0.25 else (None, 0.0)


def _cells(times: torch.Tensor, grid: torch.Tensor, t0: float, step: float | None, slack: float, rows: int,
           row: torch.Tensor) -> torch.Tensor:
    """``k * rows + r`` (int64) for each switch of ``times`` ``(n, k)``, ``r`` its path's row (``row``, ``(n, 1)``)
    and ``k`` the first grid point at or after it (``len(grid)`` past the grid). ``times`` are from ``t0`` in
    units of ``step`` (in time when ``step`` is ``None``) and are consumed."""
    count = grid.numel()
    if step is None:
        cell = torch.searchsorted(grid, times.add_(t0)).clamp_(max=count).double()
    else:
        cell = times.ceil()
        if slack > 1e-12:  # a grid off the uniform one: switches within slack of a point are located exactly
            near = (cell - times).sub_(0.5).abs_().ge_(0.5 - slack - 1e-9)
            if bool(near.any()):
                where = near.nonzero(as_tuple=True)
                cell[where] = torch.searchsorted(grid, times[where].mul_(step).add_(t0)).double()
        cell.clamp_(max=count)
    return cell.mul_(rows).add_(row).long()


@dataclass
class _Draw:
    """One pass's mask: per-step masks ``(S, B, H)`` on a fixed grid, else the switching times."""

    paths: RenewalPaths | None
    step_masks: torch.Tensor | None
    spec: PassSpec

    def mask(self, t: torch.Tensor) -> torch.Tensor:
        if self.step_masks is None:
            return self.paths.indicator(t)
        k = self.spec.step_index(t)
        return self.step_masks[k] if isinstance(k, int) else self.step_masks.index_select(0, k.reshape(1))[0]


def _check_mask(value: Any) -> str | None:
    return None if value in ("left", "occupancy") else "must be 'left' or 'occupancy'"


def _check_scope(value: Any) -> str | None:
    return None if value in ("increment", "time") else ("must be 'increment' (the paper's method) or 'time' "
                                                        "(ndebench's extension for CDEs)")


@register_regularizer(
    "continuum_dropout",
    summary="Continuum Dropout: latent components paused on alternating-renewal inactive periods; MC at test "
            "(scope: time on CDEs is ndebench's extension, not the paper's method)",
    hyperparams={
        "p": HyperParam((0.1, 0.2, 0.3, 0.4, 0.5), checks.dropout_rate, "dropout rate P(inactive at T)"),
        "m": HyperParam((5, 10, 50, 100), checks.expected_renewals, "expected number of renewals in [t0, T]"),
        "mask": HyperParam(("left",), _check_mask, "per-step mask for fixed-step solvers"),
        "n_mc": HyperParam((5,), checks.integer_at_least(1), "Monte-Carlo passes at test time"),
        "scope": HyperParam(("increment",), _check_scope,
                            "CDEs: pause the whole increment f(z) dX ('increment', the paper's method) or only its "
                            "time channel ('time', ndebench's extension, not the paper's method)"),
    },
)
class ContinuumDropout(Regularizer):
    """``dz = I(t) * f(t, z) dt (+ I(t) * g(t, z) dW)``, ``I`` an alternating renewal process per (sample, component).

    Per sample ``b`` and latent component ``i``, ``I_{b,i}(t)`` starts active at ``t0``; active periods are
    Exp(lambda1), inactive periods Exp(lambda2), with ``(lambda1, lambda2)`` solved exactly from the dropout
    rate ``p = P(I(T) = 0)`` and the expected number of renewals ``m = E[N(T)]`` on the pass's interval
    (``T = t1 - t0``). While inactive the whole increment is zero (drift and diffusion alike), so the
    component is paused. The mask is drawn once per forward pass, on the model's device from the trial's
    generator; the vector field then reads it as a deterministic function of ``t``.

    With a fixed-step solver the mask is held for all stages of a step: ``mask="left"`` uses ``I(t_k)`` at
    the step's left end, drawn directly on the grid (:func:`sample_grid_states`) as ``(S, B, H)`` zeros and
    ones, multiplied in the model's dtype, so paused components get exactly zero; ``mask="occupancy"`` uses
    the fraction of ``[t_k, t_{k+1}]`` spent active, from switching times (:func:`sample_renewal_paths`).
    With an adaptive solver ``I(t)`` is evaluated from the switching times. At test time the model averages
    ``z(T)`` over ``n_mc`` passes (Algorithm 1).

    On a CDE ``dz = f(z) dX``, ``scope="increment"`` (Eq. 8 read literally) pauses the whole increment, so a
    paused component never receives the data's increments of that period: on univariate sets this erases
    the class signal and the model does not learn (docs/regularizers.md, "Continuum Dropout on Neural CDEs").
    ``scope="time"``, ndebench's extension and not the paper's method (the paper keeps a paused component at its
    value), pauses only the time channel's ``f_0(z) dt`` and integrates the data channels unmasked.
    """

    test_time = "mc"
    stochastic = True
    capturable = True

    def __init__(self, p: float = 0.3, m: float = 10.0, mask: Literal["left", "occupancy"] = "left", n_mc: int = 5,
                 scope: ControlScope = "increment"):
        super().__init__()
        self.p, self.m, self.mask_mode, self.n_mc = float(p), float(m), mask, int(n_mc)
        problem = _check_scope(scope)
        if problem:
            raise ValueError(f"scope={scope!r} {problem}")
        self.control_scope = scope
        # Built directly (not through create_regularizer), a p or m outside the rate solver's range fails here,
        # with the same checks, rather than at the first training pass.
        solve_rates(self.p, self.m, 1.0)

    def rates(self, horizon: float) -> Rates:
        """``(lambda1, lambda2)`` for an integration interval of length ``horizon``."""
        return solve_rates(self.p, self.m, horizon)

    def draw(self, spec: PassSpec) -> _Draw:
        rates = self.rates(spec.t1 - spec.t0)
        if spec.grid is not None and self.mask_mode == "left":
            points = spec.grid[:-1]
            # Small masks are built in the model's dtype; large ones stay bool (a quarter of the memory, no page
            # faults for a fresh float buffer) and each step's slice is cast when the field reads it.
            small = points.numel() * spec.batch_size * spec.latent_size <= _CAST_AT_DRAW
            masks = sample_grid_states(points, spec.batch_size, spec.latent_size, rates, spec.generator,
                                       dtype=spec.dtype if small else torch.bool, span=(spec.t0, spec.t1))
            return _Draw(paths=None, step_masks=masks, spec=spec)
        paths = sample_renewal_paths(
            spec.batch_size, spec.latent_size, rates, spec.t0, spec.t1, spec.generator, spec.device, torch.float64,
        )
        step_masks = None
        if spec.grid is not None:
            grid = spec.grid.to(device=paths.switches.device, dtype=torch.float64)
            active = torch.stack([paths.active_time(t) for t in grid])
            step_masks = ((active[1:] - active[:-1]) / (grid[1:] - grid[:-1]).view(-1, 1, 1)).to(spec.dtype)
        return _Draw(paths=paths, step_masks=step_masks, spec=spec)

    def modulate(self, draw: _Draw, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: Role) -> torch.Tensor:
        return out * draw.mask(t).to(out.dtype)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "p": self.p, "m": self.m, "n_mc": self.n_mc, "mask": self.mask_mode,
                "scope": self.control_scope}
