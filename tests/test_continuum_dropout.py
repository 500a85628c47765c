"""Continuum Dropout's renewal mask: statistics of the sampled process and determinism (paper Section 3)."""
import dataclasses
import math
import types

import pytest
import scipy.stats
import torch
import torch.utils._pytree as pytree
from fakes import DEVICES
from ndebench.models.integrate import SolverConfig, TrialRNG, integrate
from ndebench.regularizers import continuum_dropout
from ndebench.regularizers.base import PassSpec, StepClock
from ndebench.regularizers.continuum_dropout import (
    ContinuumDropout,
    _last_event_states,
    random_words,
    sample_grid_states,
    sample_renewal_paths,
)
from ndebench.regularizers.rates import expected_active_time, solve_rates
from ndebench.regularizers.registry import create_regularizer
from torch.utils._python_dispatch import TorchDispatchMode

N_SIGMA = 5.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p,m,T", [(0.3, 10, 1.0), (0.1, 5, 1.0), (0.5, 50, 2.0), (0.2, 1, 0.5), (0.4, 100, 160.0)])
def test_sampled_process_matches_theory(p, m, T, device):
    rates = solve_rates(p, m, T)
    g = torch.Generator(device=device).manual_seed(1234)
    paths = sample_renewal_paths(200, 100, rates, 0.0, T, g, device=device, dtype=torch.float64)
    n = 200 * 100
    end = torch.tensor(T, dtype=torch.float64, device=device)

    inactive = 1.0 - paths.indicator(end)
    se = math.sqrt(p * (1 - p) / n)
    assert abs(inactive.mean().item() - p) < N_SIGMA * se

    renewals = paths.renewals(end).double()
    assert abs(renewals.mean().item() - m) < N_SIGMA * renewals.std().item() / math.sqrt(n)

    active = paths.active_time(end)
    expected = expected_active_time(rates.lambda1, rates.lambda2, T)
    assert abs(active.mean().item() - expected) < N_SIGMA * active.std().item() / math.sqrt(n)


def test_process_starts_active_and_covers_the_horizon():
    paths = sample_renewal_paths(50, 20, solve_rates(0.5, 100, 1.0), 0.0, 1.0, torch.Generator().manual_seed(0))
    assert torch.all(paths.indicator(torch.tensor(0.0)) == 1)
    assert torch.all(paths.switches[..., -1] > 1.0)
    assert torch.all(paths.switches[..., 1:] >= paths.switches[..., :-1])


def test_indicator_is_deterministic_in_t_and_flips_at_switches():
    paths = sample_renewal_paths(4, 3, solve_rates(0.3, 10, 1.0), 0.0, 1.0, torch.Generator().manual_seed(5),
                                 dtype=torch.float64)
    t = torch.tensor(0.37, dtype=torch.float64)
    assert torch.equal(paths.indicator(t), paths.indicator(t))
    first = paths.switches[0, 0, 0]
    assert paths.indicator(torch.nextafter(first, torch.tensor(-1.0, dtype=torch.float64)))[0, 0] == 1
    assert paths.indicator(first)[0, 0] == 0


def test_same_generator_seed_gives_same_mask_and_different_seed_differs():
    rates = solve_rates(0.3, 10, 1.0)
    a = sample_renewal_paths(8, 16, rates, 0.0, 1.0, torch.Generator().manual_seed(7))
    b = sample_renewal_paths(8, 16, rates, 0.0, 1.0, torch.Generator().manual_seed(7))
    c = sample_renewal_paths(8, 16, rates, 0.0, 1.0, torch.Generator().manual_seed(8))
    assert torch.equal(a.switches, b.switches)
    assert not torch.equal(a.switches[..., :4], c.switches[..., :4])


class ConstantField(torch.nn.Module):
    def forward(self, t, z):
        return torch.ones_like(z)


def test_paused_components_do_not_move_and_active_ones_move_by_dt():
    # With f = 1 and Euler, each step adds I(t_k) * dt: the increment is dt where active, exactly 0 where paused.
    times = torch.linspace(0, 1, 21, dtype=torch.float64)
    reg = ContinuumDropout(p=0.4, m=10)
    reg.train()
    z0 = torch.zeros(64, 8, dtype=torch.float64)
    path = integrate(ConstantField(), z0, times, solver=SolverConfig("euler"), rng=TrialRNG.from_seed(3),
                     regularizer=reg, output="times")
    increments = path[1:] - path[:-1]
    dt = times[1] - times[0]
    assert torch.all((increments == 0) | torch.isclose(increments, dt.expand_as(increments), rtol=0, atol=1e-12))
    assert (increments == 0).any() and (increments != 0).any()
    # The mask integrates to the active time on the grid: z(T) = sum_k I(t_k) dt.
    reg2 = ContinuumDropout(p=0.4, m=10)
    draw = reg2.draw(PassSpec(64, 8, 0.0, 1.0, times, TrialRNG.from_seed(3).regularizer, torch.device("cpu"),
                              torch.float64))
    assert torch.allclose(path[-1], draw.step_masks.sum(0) * dt)


def test_rk4_stages_of_a_step_share_one_mask():
    # With RK4 and f = 1 an increment is dt * (k1 + 2k2 + 2k3 + k4) / 6; one mask per step makes it 0 or dt.
    times = torch.linspace(0, 1, 11, dtype=torch.float64)
    reg = ContinuumDropout(p=0.5, m=20)
    path = integrate(ConstantField(), torch.zeros(32, 4, dtype=torch.float64), times, solver=SolverConfig("rk4"),
                     rng=TrialRNG.from_seed(0), regularizer=reg, output="times")
    increments = path[1:] - path[:-1]
    assert torch.all(torch.isclose(increments, torch.zeros_like(increments), atol=1e-12)
                     | torch.isclose(increments, torch.full_like(increments, 0.1), atol=1e-12))


def test_occupancy_mask_is_the_active_fraction_of_each_step():
    times = torch.linspace(0, 1, 11, dtype=torch.float64)
    reg = ContinuumDropout(p=0.3, m=50, mask="occupancy")
    path = integrate(ConstantField(), torch.zeros(16, 4, dtype=torch.float64), times, solver=SolverConfig("euler"),
                     rng=TrialRNG.from_seed(0), regularizer=reg, output="times")
    # Euler with the occupancy mask integrates I exactly: z(T) equals the active time of [0, T].
    paths = sample_renewal_paths(16, 4, reg.rates(1.0), 0.0, 1.0, TrialRNG.from_seed(0).regularizer,
                                 dtype=torch.float64)
    assert torch.allclose(path[-1], paths.active_time(torch.tensor(1.0, dtype=torch.float64)), atol=1e-12)


def test_mask_off_in_eval_for_deterministic_protocol_but_on_for_mc():
    reg = create_regularizer("continuum_dropout", p=0.3, m=10)
    reg.eval()
    assert reg.test_time == "mc" and reg.active()
    assert create_regularizer("continuum_dropout", p=0.3, m=10, n_mc=7).n_mc == 7


def test_invalid_hyperparameters_are_named():
    with pytest.raises(ValueError, match="p=1.5"):
        create_regularizer("continuum_dropout", p=1.5)
    with pytest.raises(ValueError, match="m=0"):
        create_regularizer("continuum_dropout", m=0)
    with pytest.raises(ValueError, match="valid: .*'m'"):
        create_regularizer("continuum_dropout", q=0.1)


def _grid_chain_moments(rates, grid):
    """Exact P(active at grid[k]) and E[#on->off], E[#off->on] between consecutive grid points."""
    s = rates.lambda1 + rates.lambda2
    t = grid - grid[0]
    active = rates.lambda2 / s + rates.lambda1 / s * torch.exp(-s * t)
    jump = -torch.expm1(-s * (grid[1:] - grid[:-1]))
    offs = (active[:-1] * jump * rates.lambda1 / s).sum().item()
    ons = ((1 - active[:-1]) * jump * rates.lambda2 / s).sum().item()
    return active, offs, ons


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p,m,T,points", [(0.3, 10, 1.0, 101), (0.5, 100, 160.0, 161), (0.1, 5, 2.0, 7),
                                          (0.4, 50, 1.0, 1001)])
def test_grid_sampler_matches_the_markov_chain_on_the_grid(p, m, T, points, device):
    rates = solve_rates(p, m, T)
    grid = torch.linspace(0.0, T, points, dtype=torch.float64)
    states = sample_grid_states(grid, 100, 100, rates, torch.Generator(device=device).manual_seed(11)).double().cpu()
    n = states.shape[1] * states.shape[2]
    active, offs, ons = _grid_chain_moments(rates, grid)
    assert torch.all(states[0] == 1)
    # P(I(T) = 0) = p, the defining property, exactly at the grid's end.
    assert abs((1 - states[-1]).mean().item() - p) < N_SIGMA * math.sqrt(p * (1 - p) / n)
    # Every grid marginal P(I(t_k) = 1) = l2/s + l1/s e^{-s t_k} (within 5 SE, plus a Bonferroni margin).
    se = torch.sqrt(active * (1 - active) / n).clamp(min=1e-12)
    assert torch.all((states.mean((1, 2)) - active).abs() <= (N_SIGMA + 1) * se)
    # Expected active time of the left-endpoint mask: sum_k P(I(t_k) = 1) dt_k.
    dt = (grid[1:] - grid[:-1]).view(-1, 1, 1)
    active_time = (states[:-1] * dt).sum(0).flatten()
    expected = (active[:-1] * dt.flatten()).sum().item()
    assert abs(active_time.mean().item() - expected) < N_SIGMA * active_time.std().item() / math.sqrt(n)
    # Observed on->off and off->on transitions between grid points: exact chain expectations.
    flips = states[1:] - states[:-1]
    for observed, mean in (((flips < 0).sum(0).flatten().double(), offs), ((flips > 0).sum(0).flatten().double(), ons)):
        assert abs(observed.mean().item() - mean) < N_SIGMA * observed.std().item() / math.sqrt(n)


def test_grid_renewal_count_tends_to_m_and_expected_active_time_to_the_integral():
    # The grid chain is the continuous process observed at the grid: as dt -> 0 the observed off->on count
    # (completed cycles) tends to E[N(T)] = m and the left Riemann sum of P(active) to the expected active time.
    p, m, T = 0.3, 10.0, 1.0
    rates = solve_rates(p, m, T)
    active, _, ons = _grid_chain_moments(rates, torch.linspace(0.0, T, 20001, dtype=torch.float64))
    assert ons == pytest.approx(m, rel=2e-3)
    assert (active[:-1].sum().item() * T / 20000) == pytest.approx(
        expected_active_time(rates.lambda1, rates.lambda2, T), rel=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p,m,T", [(0.3, 10, 1.0), (0.5, 100, 160.0)])
def test_grid_sampler_agrees_with_the_switching_time_sampler_on_the_grid(p, m, T, device):
    rates = solve_rates(p, m, T)
    grid = torch.linspace(0.0, T, 41, dtype=torch.float64)
    fast = sample_grid_states(grid, 100, 100, rates, torch.Generator(device=device).manual_seed(1)).double().cpu()
    slow = sample_renewal_paths(100, 100, rates, 0.0, T, torch.Generator(device=device).manual_seed(2),
                                dtype=torch.float64).indicator(grid.to(device)).cpu()
    n = 100 * 100
    pooled = (fast.mean((1, 2)) + slow.mean((1, 2))) / 2
    se = torch.sqrt(2 * pooled * (1 - pooled) / n).clamp(min=1e-12)
    assert torch.all((fast.mean((1, 2)) - slow.mean((1, 2))).abs() <= (N_SIGMA + 1) * se)
    flips_fast = (fast[1:] - fast[:-1]).abs().sum(0).flatten()
    flips_slow = (slow[1:] - slow[:-1]).abs().sum(0).flatten()
    se_diff = math.sqrt((flips_fast.var().item() + flips_slow.var().item()) / n)
    assert abs(flips_fast.mean().item() - flips_slow.mean().item()) < N_SIGMA * se_diff


def _reference_chain(points, batch, latent, rates, generator):
    """The grid chain written plainly: per step and path one float64 uniform u; u < q (1 - a) sets the path
    active, q (1 - a) <= u < q inactive, u >= q keeps its state (uniformization at s = lambda1 + lambda2)."""
    s = rates.lambda1 + rates.lambda2
    q = -torch.expm1(-s * (points[1:] - points[:-1]).double())
    states = [torch.ones(batch, latent, dtype=torch.bool)]
    for qk in q.tolist():
        u = torch.rand(batch, latent, dtype=torch.float64, generator=generator)
        states.append(torch.where(u < qk, u < qk * rates.lambda2 / s, states[-1]))
    return torch.stack(states)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("p,m,T,points", [(0.3, 10, 1.0, 100), (0.5, 100, 160.0, 161), (0.2, 5, 1.0, 30)])
def test_grid_sampler_has_the_law_of_a_plain_per_step_chain(p, m, T, points, device):
    # Two-sample comparison with a plain float64 reference of the chain: flip counts per path (chi-square on
    # their histogram), every step's P(active) and P(active at t_k and t_{k+1}).
    rates = solve_rates(p, m, T)
    grid = torch.linspace(0.0, T, points)
    new = sample_grid_states(grid, 100, 100, rates, torch.Generator(device=device).manual_seed(5)).cpu()
    old = _reference_chain(grid, 100, 100, rates, torch.Generator().manual_seed(6))
    n = 100 * 100
    flips = [(x[1:] != x[:-1]).sum(0).flatten() for x in (new, old)]
    edges = torch.quantile(torch.cat(flips).double(), torch.linspace(0, 1, 11, dtype=torch.float64)).unique()
    counts = [torch.histogram(f.double(), bins=edges).hist for f in flips]
    table = torch.stack(counts)
    table = table[:, table.sum(0) > 0].numpy()
    assert scipy.stats.chi2_contingency(table).pvalue > 1e-4
    for stat in (lambda x: x.double().mean((1, 2)), lambda x: (x[1:] & x[:-1]).double().mean((1, 2))):
        a, b = stat(new), stat(old)
        pooled = (a + b) / 2
        assert torch.all((a - b).abs() <= (N_SIGMA + 1) * torch.sqrt(2 * pooled * (1 - pooled) / n) + 1e-12)


class _SameDevice(TorchDispatchMode):
    """Fails an op whose tensor arguments are not all on ``device`` (0-dim CPU scalars aside, as CUDA allows);
    an explicit move onto ``device`` (``.to(device)``) is no mix."""

    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        moved = func is torch.ops.aten._to_copy.default and (kwargs or {}).get("device") == self.device
        for leaf in [] if moved else pytree.tree_leaves((args, kwargs or {})):
            if isinstance(leaf, torch.Tensor) and leaf.device != self.device and not (
                    leaf.device.type == "cpu" and leaf.dim() == 0):
                raise AssertionError(f"{func}: a tensor on {leaf.device} beside {self.device}")
        return func(*args, **(kwargs or {}))


def test_the_accelerator_branch_keeps_every_tensor_on_the_device(monkeypatch):
    # The `meta` device stands in for CUDA here: a draw for a model on it, its mask lookup by time, and the
    # switching times' indicator read at host times run on meta alone (a host tensor beside them fails).
    meta = torch.device("meta")
    monkeypatch.setattr(continuum_dropout, "random_words",
                        lambda count, generator, scratch=False: torch.empty(count, dtype=torch.int64, device=meta))
    generator = types.SimpleNamespace(device=meta)
    grid = torch.linspace(0.0, 1.0, 21, device=meta)
    spec = PassSpec(8, 4, 0.0, 1.0, grid, generator, meta, torch.float32)
    reg = ContinuumDropout(p=0.3, m=5)
    with _SameDevice(meta):
        draw = reg.draw(spec)
        assert draw.step_masks.shape == (20, 8, 4) and draw.step_masks.device == meta
        out = reg.modulate(draw, torch.tensor(0.5, device=meta), None, torch.empty(8, 4, device=meta), "drift")
        assert out.device == meta
        paths = continuum_dropout.RenewalPaths(torch.empty(8, 4, 6, dtype=torch.float64, device=meta), 0.0)
        assert paths.indicator(torch.linspace(0.0, 1.0, 5)).device == meta
        assert paths.active_time(torch.tensor(1.0)).device == meta



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_masks_a_draw_casts_are_the_grid_states_as_zeros_and_ones(dtype):
    """A draw's masks are the grid states as 0/1 in the model's dtype, which an Euler step takes into its dt."""
    times = torch.linspace(0.0, 1.0, 31, dtype=dtype)
    spec = PassSpec(16, 8, 0.0, 1.0, times, torch.Generator().manual_seed(2), torch.device("cpu"), dtype)
    regularizer = ContinuumDropout(p=0.3, m=10)
    draw = regularizer.draw(spec)
    states = sample_grid_states(times[:-1], 16, 8, solve_rates(0.3, 10, 1.0), torch.Generator().manual_seed(2))
    masks = regularizer.step_mask(draw)
    assert masks is draw.step_masks and masks.dtype == dtype and masks.shape == (30, 16, 8)
    assert torch.equal(masks, states.to(dtype))
    occupancy = ContinuumDropout(p=0.3, m=10, mask="occupancy")
    assert occupancy.step_mask(occupancy.draw(spec)) is None


def test_grid_sampler_is_reproducible_from_the_seed_and_starts_active():
    rates = solve_rates(0.3, 10, 1.0)
    grid = torch.linspace(0.0, 1.0, 11)
    a = sample_grid_states(grid, 8, 16, rates, torch.Generator().manual_seed(7))
    b = sample_grid_states(grid, 8, 16, rates, torch.Generator().manual_seed(7))
    c = sample_grid_states(grid, 8, 16, rates, torch.Generator().manual_seed(8))
    assert a.dtype == torch.bool and a.shape == (11, 8, 16)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.all(a[0])


def test_the_accelerators_whole_tensor_chain_equals_the_per_interval_recursion():
    # keep: no event in the interval; on: an event that sets the state active (never both, as in the sampler).
    g = torch.Generator().manual_seed(3)
    u = torch.rand(60, 9, 11, generator=g)
    keep, on = u >= 0.4, u < 0.15
    states = [torch.ones(9, 11, dtype=torch.bool)]
    for k in range(60):
        states.append((states[-1] & keep[k]) | on[k])
    assert torch.equal(_last_event_states(keep, on), torch.stack(states[1:]))


class MatrixField(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = torch.nn.Linear(hidden, hidden)

    def forward(self, t, z):
        return torch.tanh(self.net(z))


@pytest.mark.parametrize("method,adjoint,step_size", [("euler", True, None), ("rk4", True, None),
                                                      ("euler", False, None), ("rk4", True, 0.03),
                                                      ("midpoint", False, 0.07)])
def test_counted_steps_give_the_same_masks_as_lookup_by_time(monkeypatch, method, adjoint, step_size):
    # The step clock must reproduce the time lookup exactly: forward values and adjoint gradients agree bit for bit
    # (Euler without adjoint: the counted step's mask taken into the step against the field masked by time).
    times = torch.linspace(0, 1, 21, dtype=torch.float64)
    z0 = torch.randn(16, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def run():
        torch.manual_seed(0)
        field = MatrixField(6).double()
        reg = ContinuumDropout(p=0.4, m=20)
        solver = SolverConfig(method, step_size=step_size, adjoint=adjoint)
        zT = integrate(field, z0, times, solver=solver, rng=TrialRNG.from_seed(5), regularizer=reg)
        zT.square().sum().backward()
        return zT.detach(), field.net.weight.grad

    counted = run()
    monkeypatch.setattr(StepClock, "forward_step", StepClock.stop)
    monkeypatch.setattr(StepClock, "backward_step", StepClock.stop)
    monkeypatch.setattr(ContinuumDropout, "step_mask", lambda self, draw: None)
    looked_up = run()
    assert torch.equal(counted[0], looked_up[0]) and torch.equal(counted[1], looked_up[1])


def test_step_clock_counts_forward_then_backward_and_restarts_for_a_second_backward():
    clock = StepClock()
    seen = []
    for _ in range(3):
        clock.forward_step()
        seen.append(clock.counted)
    for _ in range(6):
        clock.backward_step()
        seen.append(clock.counted)
    assert seen == [0, 1, 2, 2, 1, 0, 2, 1, 0]


def _tiny_ncde(reg):
    from ndebench.models.base import DataSpec
    from ndebench.models.registry import create_model

    torch.manual_seed(0)
    times = torch.linspace(0, 1, 12)
    model = create_model("neural_cde", DataSpec(2, 3, times=times), hidden_size=8, regularizer=reg)
    model.eval()
    values = torch.randn(6, 12, 2, generator=torch.Generator().manual_seed(1))
    return model, model.prepare(times, values)


def test_mc_prediction_in_chunks_is_the_mean_over_separate_passes():
    model, inputs = _tiny_ncde(ContinuumDropout(p=0.3, m=10, n_mc=4))
    pred = model.predict(inputs, TrialRNG.from_seed(9), passes_per_chunk=1)
    rng = TrialRNG.from_seed(9)
    with torch.no_grad():
        z = torch.stack([model.latent(inputs, rng) for _ in range(4)])
    assert torch.equal(pred.z_mean, z.mean(0)) and torch.equal(pred.z_var, z.var(0))
    assert torch.equal(pred.logits, model.head(z.mean(0)))
    assert torch.allclose(pred.probs, torch.softmax(model.head(z.reshape(24, -1)).view(4, 6, -1), -1).mean(0))
    batched = model.predict(inputs, TrialRNG.from_seed(9))
    assert batched.z_mean.shape == (6, 8) and not torch.equal(batched.z_mean, pred.z_mean)


def test_mc_prediction_halves_the_chunk_when_memory_runs_out(monkeypatch):
    model, inputs = _tiny_ncde(ContinuumDropout(p=0.3, m=10, n_mc=5))
    real = type(model).latent
    sizes = []

    def limited(self, batch, rng):
        sizes.append(batch.shape[0])
        if batch.shape[0] > 12:
            raise torch.OutOfMemoryError("simulated: more than 2 passes of 6 rows")
        return real(self, batch, rng)

    monkeypatch.setattr(type(model), "latent", limited)
    pred = model.predict(inputs, TrialRNG.from_seed(0))
    assert sizes == [30, 18, 12, 12, 6] and model.mc_chunk == 2
    assert pred.z_mean.shape == (6, 8) and torch.all(pred.z_var > 0)
    sizes.clear()
    model.predict(inputs, TrialRNG.from_seed(0))
    assert sizes == [12, 12, 6]


def test_random_words_depend_on_the_seed_only_not_on_the_thread_count():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = random_words(2**20, torch.Generator().manual_seed(4))
        torch.set_num_threads(2)
        two = random_words(2**20, torch.Generator().manual_seed(4))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    bits = one.view(torch.int32)
    # every bit of the 32-bit lanes is a fair coin: 2^21 lanes, 5 SE of a proportion 1/2 is 0.0017
    for bit in (0, 15, 31):
        assert abs(((bits >> bit) & 1).double().mean().item() - 0.5) < 5 * 0.5 / math.sqrt(bits.numel())


def test_host_flags_are_the_comparisons_of_full_32_bit_uniforms(monkeypatch):
    """The CPU draws each uniform's top byte and, only where it ties a threshold's top byte, its low 24 bits: every
    flag must be the 32-bit comparison of the uniform so assembled, whatever an undrawn low part would have been."""
    import numpy as np

    drawn = []
    real = continuum_dropout.random_words

    def recording(count, generator, scratch=False):
        drawn.append(real(count, generator).clone())
        return drawn[-1]

    monkeypatch.setattr(continuum_dropout, "random_words", recording)
    steps, size = 40, 300
    rng = np.random.default_rng(0)
    keep_at = rng.integers(-(2**31), 2**31, steps).astype(np.int32)
    on_below = rng.integers(-(2**31), 2**31, steps).astype(np.int32)
    keep_at[:2], on_below[:2] = 2**31 - 1, -(2**31)  # the clamped ends: keep only at the top value, never on
    keep, on = np.empty((steps, size), dtype=bool), np.empty((steps, size), dtype=bool)
    continuum_dropout._host_flags(keep_at, on_below, torch.Generator().manual_seed(1), keep, on)

    unsigned = [b.astype(np.int64)[:, None] + 2**31 for b in (keep_at, on_below)]
    top = drawn[0].numpy().view(np.uint8)[: steps * size].reshape(steps, size).astype(np.int64)
    tied = (top == unsigned[0] >> 24) | (top == unsigned[1] >> 24)
    assert len(drawn) == 2 and tied.sum() > 50  # 2 of 256 top bytes tie: about 94 here
    low = np.zeros((steps, size), dtype=np.int64)
    low[tied] = drawn[1].numpy().view(np.uint32)[: tied.sum()] & 0xFFFFFF
    for undrawn in (0, 0xFFFFFF):
        full = (top << 24) | np.where(tied, low, undrawn)
        assert np.array_equal(keep, full >= unsigned[0]) and np.array_equal(on, full < unsigned[1])


def test_host_flags_settle_a_tie_at_the_threshold_itself(monkeypatch):
    # Crafted words: every top byte ties the thresholds' (0x80); the low 24 bits sit just below, at and just above
    # the thresholds' (0x123456). A uniform equal to a threshold is kept (u >= keep_at) and not turned on (u < on).
    import numpy as np

    words = [torch.tensor([0x80] * 8, dtype=torch.uint8).view(torch.int64),
             torch.tensor([0x123455, 0x123456, 0x123457, 0x123456], dtype=torch.int32).view(torch.int64)]
    monkeypatch.setattr(continuum_dropout, "random_words", lambda count, generator, scratch=False: words.pop(0))
    bound = np.array([0x80123456 - 2**31], dtype=np.int32)
    keep, on = np.empty((1, 4), dtype=bool), np.empty((1, 4), dtype=bool)
    continuum_dropout._host_flags(bound, bound, torch.Generator(), keep, on)
    assert keep.tolist() == [[False, True, True, True]] and on.tolist() == [[True, False, False, False]]


@pytest.mark.parametrize("host", [True, False], ids=["cpu-loop", "whole-tensor"])
@pytest.mark.parametrize("batch,hidden", [(8, 16), (5, 3)])
@pytest.mark.parametrize("shared", [True, False], ids=["same-rates", "own-rates"])
def test_members_side_by_side_are_each_member_s_own_draw(monkeypatch, host, batch, hidden, shared):
    """A stack's members draw their masks together (``sample_member_states``): member k's rows are bit for bit
    what it draws alone from its own generator, with its own (p, m), on both branches of the chain."""
    from ndebench.regularizers.continuum_dropout import sample_member_states

    if not host:
        monkeypatch.setattr(continuum_dropout, "_HOST_SHORTCUTS", frozenset())
    grid = torch.linspace(0.0, 2.0, 23)
    rates = [solve_rates(0.3, 10, 2.0)] * 3 if shared else [solve_rates(p, m, 2.0) for p, m in
                                                            ((0.1, 5), (0.3, 10), (0.5, 50))]
    together = sample_member_states(grid, batch, hidden, rates, [torch.Generator().manual_seed(s) for s in (4, 5, 6)])
    alone = [sample_grid_states(grid, batch, hidden, r, torch.Generator().manual_seed(s))
             for r, s in zip(rates, (4, 5, 6), strict=True)]
    assert together.shape == (23, 3 * batch, hidden) and torch.equal(together, torch.cat(alone, dim=1))


def test_a_stacked_draw_modulates_every_member_s_rows_as_its_own_draw():
    grid = torch.linspace(0.0, 1.0, 11)
    members = [ContinuumDropout(p=p, m=m) for p, m in ((0.1, 5), (0.5, 50))]

    def spec(seed, batch=4):
        return PassSpec(batch, 6, 0.0, 1.0, grid, torch.Generator().manual_seed(seed), torch.device("cpu"),
                        torch.float32, clock=StepClock())

    draw = members[0].draw_stacked(members, [spec(1), spec(2)])
    own = [m.draw(spec(s)) for m, s in zip(members, (1, 2), strict=True)]
    out = torch.randn(8, 6)
    for t in grid[:-1]:
        assert torch.equal(members[0].modulate(draw, t, out, out, "drift"),
                           torch.cat([m.modulate(d, t, o, o, "drift") for m, d, o in zip(members, own, out.chunk(2),
                                                                                        strict=True)]))
    assert members[0].draw_stacked(members, [dataclasses.replace(spec(1), grid=None)] * 2) is None
    occupancy = [ContinuumDropout(mask="occupancy")] * 2
    assert occupancy[0].draw_stacked(occupancy, [spec(1), spec(2)]) is None
