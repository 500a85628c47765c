"""An SDE's Brownian motion on the CPU, for torchsde's Euler and Milstein steps without adjoint, is its increments on
the solve's step grid drawn in one call (``GridBrownian``): torchsde asks it exactly those intervals, it has the
law of Brownian motion there, and a stacked member's increments are its trial's alone."""
import math

import pytest
import torch
import torchsde
from ndebench.models.integrate import GridBrownian, StackedRNG, TrialRNG, sde_steps

TIMES = torch.linspace(0, 2, 41)
DT = float((TIMES[1:] - TIMES[:-1]).min())


class UnitNoise(torchsde.SDEIto):
    """``dz = dW``: the solution at T is the sum of the increments torchsde asked for."""

    def __init__(self):
        super().__init__(noise_type="diagonal")

    def f(self, t, y):
        return torch.zeros_like(y)

    def g(self, t, y):
        return torch.ones_like(y)


@pytest.mark.parametrize("method", ["euler", "milstein"])
def test_torchsde_asks_a_grid_motion_only_its_steps_and_sums_its_increments(method):
    z0 = torch.zeros(3, 2)
    bm = TrialRNG.from_seed(5).brownian(TIMES, z0, dt=DT)
    assert isinstance(bm, GridBrownian) and bm.grid == sde_steps(TIMES, DT)
    path = torchsde.sdeint(UnitNoise(), z0, TIMES, bm=bm, dt=DT, method=method)
    total = z0.clone()
    for increment in bm.increments:
        total = total + increment
    assert torch.equal(path[-1], total)


def test_the_grid_increments_have_the_law_of_brownian_motion():
    n = 20_000
    bm = TrialRNG.from_seed(0).brownian(TIMES, torch.zeros(n, 1), dt=DT)
    steps = torch.tensor(bm.grid[1:], dtype=torch.float64) - torch.tensor(bm.grid[:-1], dtype=torch.float64)
    dw = bm.increments.double()[:, :, 0]  # (S, n)
    # Each step's increment is N(0, dt): its mean within 4 standard errors of 0, its variance within 4 of dt.
    for k in (0, len(steps) // 2, len(steps) - 1):
        dt = float(steps[k])
        assert abs(float(dw[k].mean())) < 4 * math.sqrt(dt / n)
        assert abs(float(dw[k].var()) - dt) < 4 * dt * math.sqrt(2 / (n - 1))
    # W(T) = sum of the increments is N(0, T), and increments of different steps are uncorrelated.
    total, span = dw.sum(0), float(steps.sum())
    assert abs(float(total.mean())) < 4 * math.sqrt(span / n)
    assert abs(float(total.var()) - span) < 4 * span * math.sqrt(2 / (n - 1))
    assert abs(float(torch.corrcoef(dw[:2])[0, 1])) < 4 / math.sqrt(n)


def test_a_stacked_member_draws_the_increments_of_its_trial_alone():
    stacked = StackedRNG.from_seed(0)
    stacked.members = [TrialRNG.from_seed(4), TrialRNG.from_seed(5)]
    bm = stacked.brownian(TIMES, torch.zeros(6, 2), dt=DT)
    assert isinstance(bm, GridBrownian) and bm.shape == (6, 2)
    for k, seed in enumerate((4, 5)):
        alone = TrialRNG.from_seed(seed).brownian(TIMES, torch.zeros(3, 2), dt=DT)
        assert torch.equal(bm.increments[:, 3 * k:3 * (k + 1)], alone.increments)


def test_a_query_off_the_grid_is_refused_and_other_solves_keep_torchsde_s_interval():
    bm = TrialRNG.from_seed(1).brownian(TIMES, torch.zeros(2, 2), dt=DT)
    with pytest.raises(ValueError, match="answers its steps' increments only"):
        bm(0.0, DT / 2)
    with pytest.raises(ValueError, match="return_A=True"):
        bm(0.0, bm.grid[1], return_A=True)
    # No step (adjoint, adaptive) or a Levy area (srk): torchsde's own Brownian interval, as before.
    assert isinstance(TrialRNG.from_seed(1).brownian(TIMES, torch.zeros(2, 2)), torchsde.BrownianInterval)
    assert isinstance(TrialRNG.from_seed(1).brownian(TIMES, torch.zeros(2, 2), "space-time", dt=DT),
                      torchsde.BrownianInterval)


def test_restoring_a_fresh_state_forgets_the_grid_generator_made_since():
    # An evaluation resets its reused generators to a fresh trial's state: the next solve must draw what a fresh
    # trial's first solve draws, not continue the stream the last evaluation advanced.
    z0, used = torch.zeros(4, 3), TrialRNG.for_evaluation(7)
    used.brownian(TIMES, z0, dt=DT)
    used.load_state(TrialRNG.for_evaluation(7).state())
    again = used.brownian(TIMES, z0, dt=DT).increments
    assert torch.equal(again, TrialRNG.for_evaluation(7).brownian(TIMES, z0, dt=DT).increments)
