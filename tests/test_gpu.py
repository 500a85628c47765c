"""The CUDA branches: random words drawn on the device, the grid sampler, the step lookup by time, and the
per-device regularizer generator. Skipped where torch finds no CUDA device (marker ``gpu``)."""
from __future__ import annotations

import bisect

import pytest
import torch
from ndebench.models.integrate import TrialRNG
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.continuum_dropout import random_words, sample_grid_states
from ndebench.regularizers.rates import solve_rates

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def test_random_words_stay_on_the_device_and_follow_the_seed():
    draw = [random_words(1 << 20, torch.Generator(device=CUDA).manual_seed(seed)) for seed in (0, 0, 1)]
    assert draw[0].device.type == "cuda" and draw[0].dtype == torch.int64 and draw[0].numel() == 1 << 20
    assert torch.equal(draw[0], draw[1]) and not torch.equal(draw[0], draw[2])


def test_grid_states_on_the_device_start_active_and_end_inactive_with_probability_p():
    rates = solve_rates(0.3, 10.0, 1.0)
    grid = torch.linspace(0, 1, 201)
    states = sample_grid_states(grid, 200, 200, rates, torch.Generator(device=CUDA).manual_seed(3))
    assert states.device.type == "cuda" and bool(states[0].all())
    assert abs(1 - states[-1].double().mean().item() - 0.3) < 0.01


def test_step_index_by_time_on_the_device_matches_the_host_search():
    grid = torch.linspace(0, 1, 11, device=CUDA)
    spec = PassSpec(1, 1, 0.0, 1.0, grid, torch.Generator(device=CUDA), CUDA, torch.float32)
    bounds = grid[1:-1].tolist()
    for t in (0.0, 0.05, 0.1, 0.55, 0.99):
        assert int(spec.step_index(torch.tensor(t, device=CUDA))) == bisect.bisect_right(bounds, t)


def test_the_regularizer_generator_per_device_is_derived_once_from_the_seed():
    first, again = TrialRNG.from_seed(5), TrialRNG.from_seed(5)
    device = first.regularizer_on(CUDA)
    assert device.device.type == "cuda" and first.regularizer_on("cuda:0") is device
    assert torch.equal(torch.rand(4, generator=device, device=CUDA),
                       torch.rand(4, generator=again.regularizer_on(CUDA), device=CUDA))
