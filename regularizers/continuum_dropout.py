"""Continuum Dropout (Lee et al., AAAI 2026): an alternating-renewal on/off mask on the latent dynamics."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from ndebench.regularizers import checks
from ndebench.regularizers.base import ControlScope, PassSpec, Regularizer, Role
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.rates import Rates, solve_rates
from ndebench.regularizers.registry import register_regularizer


@dataclass
class RenewalPaths:
    """Switching times of ``(B, H)`` independent alternating renewal processes that start active at ``t0``.

    ``switches`` has shape ``(B, H, K)``: ``switches[..., j]`` is ``t0 + S_{j+1}``, the (j+1)-th switch, where
    odd-numbered switches (``S_1, S_3, ...``) start an inactive period and even-numbered ones end it. Every
    row's last switch lies beyond the horizon, so ``indicator`` is exact on ``[t0, t1]``. Times ``t`` may come
    on any device: results are on the device of ``switches``.
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
    """Draw alternating Exp(lambda1) active / Exp(lambda2) inactive durations until every path passes ``t1``.

    Durations are drawn in chunks sized from the expected number of renewals plus six standard deviations;
    a further chunk is drawn only while some path is still short of ``t1``, so there is no truncation.
    They are drawn in float64 on the generator's device and returned on ``device`` (default: the generator's,
    so that the indicator needs no transfer). Used for adaptive solvers and the occupancy mask; the
    left-endpoint grid mask uses :func:`sample_grid_states`.
    """
    horizon = t1 - t0
    cycle = 1.0 / rates.lambda1 + 1.0 / rates.lambda2
    expected = horizon / cycle
    pairs = int(math.ceil(expected + 6.0 * math.sqrt(expected + 1.0) + 4.0))
    source = generator.device
    scale = torch.tensor([1.0 / rates.lambda1, 1.0 / rates.lambda2], dtype=torch.float64, device=source)
    chunks: list[torch.Tensor] = []
    reached = torch.zeros(batch_size, latent_size, dtype=torch.float64, device=source)
    while True:
        unit = torch.empty(batch_size, latent_size, pairs, 2, dtype=torch.float64, device=source)
        unit.exponential_(1.0, generator=generator)
        durations = (unit * scale).reshape(batch_size, latent_size, 2 * pairs)
        cumulative = reached.unsqueeze(-1) + durations.cumsum(-1)
        chunks.append(cumulative)
        reached = cumulative[..., -1]
        if bool((reached > horizon).all()):
            break
    switches = (t0 + torch.cat(chunks, dim=-1)).to(device=source if device is None else device, dtype=dtype)
    return RenewalPaths(switches=switches, t0=t0)


_PARALLEL_WORDS = 2**19
_CAST_AT_DRAW = 2**22
_CHUNKS = 8
_pools: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
# Devices where a grid draw takes host-side shortcuts (a per-interval loop, numpy's cast: fastest on a CPU, but
# reading tensors on the host); the others take whole-tensor paths, which a CUDA graph can hold (the CPU suite
# checks those with the CPU taken out of this set).
_HOST_SHORTCUTS = frozenset({"cpu"})
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


def _threshold(prob: torch.Tensor) -> torch.Tensor:
    """``c`` (int32) with ``P(u < c) = prob`` (to 2^-32) for ``u`` uniform on the signed 32-bit integers."""
    return ((prob * 2.0**32).round() - 2.0**31).clamp(-(2**31), 2**31 - 1).to(torch.int32)


def sample_grid_states(
    points: torch.Tensor,
    batch_size: int,
    latent_size: int,
    rates: Rates,
    generator: torch.Generator,
) -> torch.Tensor:
    """The indicator ``I(points[k])`` ``(K, B, H)`` (bool) of ``(B, H)`` processes that start active at ``points[0]``.

    Exact without switching times: the alternating renewal process with exponential periods is the
    two-state Markov chain active -> inactive at rate lambda1, inactive -> active at rate lambda2. By
    uniformization at rate ``s = lambda1 + lambda2``, over an interval of length ``dt`` an event happens with
    probability ``q = 1 - exp(-s dt)`` and sets the state to a fresh draw, inactive with probability
    ``a = lambda1 / s``, whatever the state was. So per interval and path one uniform ``u`` decides:
    ``u < q (1 - a)`` -> active, ``u >= q`` -> unchanged, otherwise inactive. The uniforms are 32-bit
    integers compared with integer thresholds: per-interval probabilities are exact to 2^-32, finer than
    float32 uniforms. On an accelerator they are drawn whole (two per random 64-bit word) and a few
    whole-tensor ops run the chain for all intervals (:func:`_last_event_states`) on the device, without host
    synchronisation, so a draw costs a handful of launches whatever the grid's length. On the CPU each uniform
    is drawn by its top byte, and its low 24 bits only where that byte ties a threshold's
    (:func:`_host_flags`: the same comparisons from a quarter of the random bits); then per interval two
    bitwise ops on 8 flags per machine word.
    """
    return sample_member_states(points, batch_size, latent_size, [rates], [generator])


def sample_member_states(
    points: torch.Tensor,
    batch_size: int,
    latent_size: int,
    rates: Sequence[Rates],
    generators: Sequence[torch.Generator],
) -> torch.Tensor:
    """K members' indicators side by side at the P ``points``, ``(P, K * B, H)`` (bool): rows ``k * B`` to
    ``(k + 1) * B - 1`` are ``sample_grid_states(points, B, H, rates[k], generators[k])``, bit for bit. Each
    member draws its own uniforms from its own generator as it would alone; the chain then runs once for all
    members (on the CPU, per interval, two bitwise ops over the K members' lanes), which is what a stack of
    trials saves over K draws."""
    device = generators[0].device
    members = len(generators)
    states = torch.empty(points.numel(), members * batch_size, latent_size, dtype=torch.bool, device=device)
    states[0] = True
    if points.numel() == 1:
        return states
    dt = (points[1:] - points[:-1]).to(device=device, dtype=torch.float64)
    keep_at, on_below = (torch.stack(t) for t in zip(*(_thresholds(dt, r) for r in rates), strict=True))
    steps, size = points.numel() - 1, batch_size * latent_size
    if device.type not in _HOST_SHORTCUTS:
        count = (steps * size + 1) // 2
        if members == 1:
            u = random_words(count, generators[0], scratch=True).view(torch.int32).view(1, -1)
        else:
            u = torch.empty(members, 2 * count, dtype=torch.int32, device=device)
            for row, generator in zip(u, generators, strict=True):
                row.copy_(random_words(count, generator, scratch=True).view(torch.int32))
        lanes = u[:, : steps * size].view(members, steps, size).transpose(0, 1).reshape(steps, members, batch_size,
                                                                                            latent_size)
        rows = (steps, members, 1, 1)
        flags = (lanes >= keep_at.T.reshape(rows), lanes < on_below.T.reshape(rows))
        states[1:] = _last_event_states(*(f.reshape(steps, members * batch_size, latent_size) for f in flags))
        return states
    keep, on = (np.empty((steps, members, size), dtype=bool) for _ in range(2))
    for k, generator in enumerate(generators):
        _host_flags(keep_at[k].numpy(), on_below[k].numpy(), generator, keep[:, k], on[:, k])
    words = list(_words(states).numpy())  # row views made at once: indexing rows in the loop cost a third of it
    keep_w, on_w = (list(_words(torch.from_numpy(f).view(steps, members * batch_size, latent_size)).numpy())
                    for f in (keep, on))
    for k in range(steps):
        np.bitwise_and(words[k], keep_w[k], out=words[k + 1])
        np.bitwise_or(words[k + 1], on_w[k], out=words[k + 1])
    return states


def _host_flags(keep_at: np.ndarray, on_below: np.ndarray, generator: torch.Generator, keep: np.ndarray,
                on: np.ndarray) -> None:
    """Fill ``keep`` (``u >= keep_at[k]``) and ``on`` (``u < on_below[k]``), both ``(S, n)`` bool, for ``S * n``
    uniform signed 32-bit ``u`` drawn from ``generator``, on the host with a quarter of the random bits.

    Each ``u`` is drawn by its top byte first (eight per random word); the comparisons are then settled unless
    that byte equals a threshold's top byte (2 of 256 values), and only there are its low 24 bits drawn. So
    every flag has the law of a full 32-bit comparison, exact to 2^-32.
    """
    steps, size = keep.shape
    count = steps * size
    top = random_words((count + 7) // 8, generator, scratch=True).numpy().view(np.uint8)[:count].reshape(steps, size)
    # thresholds as unsigned 32-bit values (u + 2^31 on [0, 2^32)) split into their top byte and the rest
    bounds = [b.astype(np.int64) + 2**31 for b in (keep_at, on_below)]
    keep_top, on_top = ((b >> 24).astype(np.uint8)[:, None] for b in bounds)
    np.greater(top, keep_top, out=keep)
    np.less(top, on_top, out=on)
    tied = np.divmod(np.flatnonzero((top == keep_top) | (top == on_top)), size)  # flatnonzero: 2-D nonzero is slow
    if tied[0].size:
        low = random_words((tied[0].size + 1) // 2, generator).numpy().view(np.uint32)[: tied[0].size]
        full = (top[tied].astype(np.int64) << 24) | (low & 0xFFFFFF)
        keep[tied] = full >= bounds[0][tied[0]]
        on[tied] = full < bounds[1][tied[0]]


def _thresholds(dt: torch.Tensor, rates: Rates) -> tuple[torch.Tensor, torch.Tensor]:
    """Per interval of length ``dt``: the int32 thresholds below which a uniform is no event (``>= keep``) and an
    event to active (``< on``), as :func:`sample_grid_states` states them."""
    s = rates.lambda1 + rates.lambda2
    q = -torch.expm1(-s * dt)
    return _threshold(q), _threshold(q * (rates.lambda2 / s))


def _last_event_states(keep: torch.Tensor, on: torch.Tensor) -> torch.Tensor:
    """The chain's states after each interval ``(S, B, H)`` from its flags ``(S, B, H)``, in a few whole-tensor ops.

    Interval ``k`` keeps the state unless it has an event (``~keep[k]``), which sets it to ``on[k]``; so the
    state after interval ``k`` is ``on[j]`` of the last event ``j <= k``, or active (the start) without one.
    The same states as the per-interval recursion, with no launch per interval (for accelerators).
    """
    steps = torch.arange(keep.shape[0], dtype=torch.int32, device=keep.device).view(-1, 1, 1)
    last = torch.where(keep, -1, steps).cummax(0).values
    return torch.where(last >= 0, on.gather(0, last.clamp(min=0).long()), True)


_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


def _cast(flags: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool ``flags`` as 0/1 in ``dtype``; float32/float64 CPU tensors through numpy, whose vectorised cast is
    several times faster than torch's CPU cast from bool (which, with two threads on a busy machine, can cost
    more than the whole draw)."""
    if flags.device.type in _HOST_SHORTCUTS and dtype in _NUMPY_FLOATS:
        return torch.from_numpy(flags.numpy().astype(_NUMPY_FLOATS[dtype]))
    return flags.to(dtype)


def _words(flags: torch.Tensor) -> torch.Tensor:
    """``(K, B, H)`` bool as ``(K, n)`` machine words (bitwise ops then act on 8 flags at once)."""
    flat = flags.view(flags.shape[0], -1)
    return flat.view(torch.int64) if flat.shape[1] % 8 == 0 else flat.view(torch.uint8)


@dataclass
class _Draw:
    """One pass's mask: per-step masks ``(S, B, H)`` on a fixed grid, else the switching times."""

    paths: RenewalPaths | None
    step_masks: torch.Tensor | None
    spec: PassSpec
    _steps: tuple[torch.Tensor, tuple[torch.Tensor, ...]] | None = dataclasses.field(default=None, init=False,
                                                                                    repr=False, compare=False)

    @classmethod
    def on_grid(cls, states: torch.Tensor, spec: PassSpec) -> _Draw:
        """The draw of grid indicators ``states`` ``(S, B, H)`` (bool). Small masks are cast once here; large ones
        stay bool (a quarter of the memory, no page faults for a fresh float buffer) and each step's slice is cast
        when the field reads it."""
        return cls(paths=None, step_masks=_cast(states, spec.dtype) if states.numel() <= _CAST_AT_DRAW else states,
                   spec=spec)

    def mask(self, t: torch.Tensor) -> torch.Tensor:
        if self.step_masks is None:
            return self.paths.indicator(t)
        k = self.spec.step_index(t)
        if not isinstance(k, int):
            return self.step_masks.index_select(0, k.reshape(1))[0]
        # one view per step, made once per draw: indexing the tensor at every step costs half the step's
        # multiply (1.1 against 2.1 us; a caller may swap step_masks, hence the identity check)
        if self._steps is None or self._steps[0] is not self.step_masks:
            self._steps = (self.step_masks, self.step_masks.unbind(0))
        return self._steps[1][k]


@register_regularizer(
    "continuum_dropout",
    display="Continuum Dropout",
    summary="Continuum Dropout: latent components paused on alternating-renewal inactive periods; MC at test "
            "(scope: time on CDEs is ndebench's extension, not the paper's method)",
    hyperparams=BUILTINS["continuum_dropout"].hyperparams,
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
        problem = checks.control_scope(scope)
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
            return _Draw.on_grid(sample_grid_states(spec.grid[:-1], spec.batch_size, spec.latent_size, rates,
                                                    spec.generator), spec)
        paths = sample_renewal_paths(
            spec.batch_size, spec.latent_size, rates, spec.t0, spec.t1, spec.generator, spec.device, torch.float64,
        )
        step_masks = None
        if spec.grid is not None:
            grid = spec.grid.to(device=paths.switches.device, dtype=torch.float64)
            active = torch.stack([paths.active_time(t) for t in grid])
            step_masks = ((active[1:] - active[:-1]) / (grid[1:] - grid[:-1]).view(-1, 1, 1)).to(spec.dtype)
        return _Draw(paths=paths, step_masks=step_masks, spec=spec)

    def draw_stacked(self, members: Sequence[Regularizer], specs: Sequence[PassSpec]) -> _Draw | None:
        """The members' grid masks side by side, ``(S, K * B, H)`` (:func:`sample_member_states`: member k's rows
        bit for bit its own draw), so one multiply per step modulates the whole stack; on the CPU with
        ``mask="left"`` on a fixed grid, else ``None``."""
        first = specs[0]
        if (first.grid is None or first.device.type not in _HOST_SHORTCUTS
                or any(not isinstance(m, ContinuumDropout) or m.mask_mode != "left" for m in members)):
            return None
        masks = sample_member_states(first.grid[:-1], first.batch_size, first.latent_size,
                                     [m.rates(s.t1 - s.t0) for m, s in zip(members, specs, strict=True)],
                                     [s.generator for s in specs])
        return _Draw.on_grid(masks, dataclasses.replace(first, batch_size=len(specs) * first.batch_size))

    def step_mask(self, draw: _Draw) -> torch.Tensor | None:
        """A ``mask="left"`` draw on a fixed grid: its indicators ``(S, B, H)``; ``None`` for switching times (the
        occupancy fractions are not 0/1, so their products round)."""
        return draw.step_masks if draw.paths is None else None

    def modulate(self, draw: _Draw, t: torch.Tensor, z: torch.Tensor, out: torch.Tensor, role: Role) -> torch.Tensor:
        mask = draw.mask(t)
        return out * (mask if mask.dtype == out.dtype else mask.to(out.dtype))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "p": self.p, "m": self.m, "n_mc": self.n_mc, "mask": self.mask_mode,
                "scope": self.control_scope}
