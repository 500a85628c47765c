"""Continuum Dropout's renewal mask: statistics of the sampled process and determinism (paper Section 3)."""
import math

import pytest
import torch

from ndebench.models.integrate import SolverConfig, TrialRNG, integrate
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.continuum_dropout import ContinuumDropout, sample_renewal_paths
from ndebench.regularizers.rates import expected_active_time, solve_rates
from ndebench.regularizers.registry import create_regularizer

N_SIGMA = 5.0


@pytest.mark.parametrize("p,m,T", [(0.3, 10, 1.0), (0.1, 5, 1.0), (0.5, 50, 2.0), (0.2, 1, 0.5), (0.4, 100, 160.0)])
def test_sampled_process_matches_theory(p, m, T):
    rates = solve_rates(p, m, T)
    g = torch.Generator().manual_seed(1234)
    paths = sample_renewal_paths(200, 100, rates, 0.0, T, g, dtype=torch.float64)
    n = 200 * 100
    end = torch.tensor(T, dtype=torch.float64)

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
    paths = sample_renewal_paths(4, 3, solve_rates(0.3, 10, 1.0), 0.0, 1.0, torch.Generator().manual_seed(5), dtype=torch.float64)
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
    draw = reg2.draw(PassSpec(64, 8, 0.0, 1.0, times, TrialRNG.from_seed(3).regularizer, torch.device("cpu"), torch.float64))
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
    paths = sample_renewal_paths(16, 4, reg.rates(1.0), 0.0, 1.0, TrialRNG.from_seed(0).regularizer, dtype=torch.float64)
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
