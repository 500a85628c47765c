"""ODE-RNN under OI: the appended observation counts (never missing) do not make every hour an observation."""
import torch
from ndebench.datasets.protocol import observation_intensity
from ndebench.models.base import DataSpec
from ndebench.models.integrate import TrialRNG
from ndebench.models.registry import create_model

TIMES = torch.linspace(0, 1, 12)
C = 3


def _with_counts(values: torch.Tensor) -> torch.Tensor:
    """``(N, L, 2C)``: the values, then their cumulative observation counts, as the datasets' ``oi: true``."""
    return torch.cat([values, observation_intensity(values)], dim=-1)


def _predict(values: torch.Tensor, count_channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = create_model("ode_rnn", DataSpec(2 * C, 2, times=TIMES, count_channels=count_channels), hidden_size=8)
    model.eval()
    inputs = model.prepare(TIMES, values)
    with torch.no_grad():
        return inputs[..., : 2 * C], model.latent(inputs, TrialRNG.from_seed(0))


def test_fully_observed_batches_give_identical_predictions_with_and_without_the_count_declaration():
    values = _with_counts(torch.randn(5, 12, C, generator=torch.Generator().manual_seed(1)))
    (flags_oi, z_oi), (flags_plain, z_plain) = _predict(values, C), _predict(values, 0)
    assert torch.equal(flags_oi, flags_plain) and torch.equal(z_oi, z_plain)


def test_hours_without_data_are_not_observations_under_oi():
    raw = torch.randn(5, 12, C, generator=torch.Generator().manual_seed(1))
    raw[:, 3:6] = float("nan")  # three hours without any measurement
    raw[0, 8, 1] = float("nan")
    values = _with_counts(raw)
    (flags, z), (counted_flags, z_counted) = _predict(values, C), _predict(values, 0)
    observed = flags.amax(-1) > 0.5
    assert not observed[:, 3:6].any() and observed[:, [0, 1, 2, 6, 7, 8, 9, 10, 11]].all()
    assert torch.equal(flags[..., C:], flags[..., :C]), "a count channel is observed when its value is"
    assert flags[0, 8, 1] == 0 and flags[0, 8, C + 1] == 0
    assert (counted_flags.amax(-1) > 0.5).all(), "read as data, the never-missing counts mark every hour"
    assert not torch.allclose(z, z_counted)
