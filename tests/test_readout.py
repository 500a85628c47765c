"""Sepsis is read at each stay's own final observation, not at hour 72 (the reference pipelines' gather)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from fakes import make_stays
from ndebench.datasets.registry import create_dataset
from ndebench.models.base import TimedInputs, repeat_batch
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.registry import create_model
from ndebench.models.timeseries import spline_coefficients
from ndebench.platform.worker.build import data_spec

MODELS = ["neural_cde", "ancde", "gru_ode", "ode_rnn", "neural_ode"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("sepsis")
    make_stays(root, np.random.default_rng(0))
    return root, create_dataset("sepsis", data_dir=root)


def last_hours(root) -> dict[str, int]:
    """The last ICULOS <= 72 of every stay file, read independently of the loader."""
    out = {}
    for path in sorted(root.glob("training_set*/p*.psv")):
        hours = [float(line.split("|")[-2]) for line in path.read_text().splitlines()[1:] if line]
        kept = [h for h in hours if 1 <= h <= 72]
        if len(kept) > 2:
            out[path.name] = int(max(kept))
    return out


def test_final_index_is_each_stays_last_hour(bundle):
    root, data = bundle
    finals = torch.cat([data.train.final_index, data.val.final_index, data.test.final_index])
    order = torch.cat([data.extra["indices"][part] for part in ("train", "val", "test")])
    in_file_order = torch.empty_like(finals)
    in_file_order[order] = finals
    assert in_file_order.tolist() == [h - 1 for h in last_hours(root).values()]
    assert int(finals.min()) < 71 and int(finals.max()) == 71  # the fake set has short and long stays


@pytest.mark.parametrize("name", MODELS)
def test_short_stay_gives_the_same_prediction_padded_to_72_hours_or_not(name, bundle):
    """Exact with a causal control (Hermite with backward differences). A natural cubic spline is fitted
    through the whole padded row, so its pieces before the stay's end move slightly with the flat padding;
    the reference pipelines' natural splines on padded Sepsis rows share that (docs/differences.md)."""
    _, data = bundle
    split = data.train
    row = int(split.final_index.argmin())
    f = int(split.final_index[row])
    assert f < 30
    torch.manual_seed(0)
    model = create_model(
        name, data_spec(data), hidden_size=8, solver=SolverConfig("euler"),
        **({} if name == "neural_ode" else {"interpolation": "hermite"}),
    ).eval()
    values, static = split.values[row:row + 1], split.static[row:row + 1]
    padded = TimedInputs(model.prepare(data.times, values, static), split.final_index[row:row + 1])
    z_padded = model.latent(padded, TrialRNG.from_seed(0))
    model.times = data.times[: f + 1]
    z_cut = model.latent(model.prepare(data.times[: f + 1], values[:, : f + 1], static), TrialRNG.from_seed(0))
    assert torch.allclose(z_padded, z_cut, atol=1e-5, rtol=1e-5)
    model.times = data.times
    z_72 = model.latent(model.prepare(data.times, values, static), TrialRNG.from_seed(0))
    assert not torch.allclose(z_72, z_cut, atol=1e-3)  # reading at hour 72 would have been different


def test_sde_reads_each_sample_at_its_own_index(bundle):
    _, data = bundle
    split = data.train
    torch.manual_seed(0)
    model = create_model("neural_lsde", data_spec(data), hidden_size=8).eval()
    prepared = model.prepare(data.times, split.values[:6], split.static[:6])
    final = split.final_index[:6]
    z = model.latent(TimedInputs(prepared, final), TrialRNG.from_seed(3))
    # The same Brownian path, read at hour 72 for every sample and at each index by hand.
    model.times = data.times
    everyone = [model.latent(TimedInputs(prepared, torch.full_like(final, k)), TrialRNG.from_seed(3))
                for k in final.tolist()]
    for b in range(len(final)):
        assert torch.allclose(z[b], everyone[b][b])
    repeated = repeat_batch(TimedInputs(prepared, final), 2)
    assert torch.equal(repeated.final_index, final.repeat(2))


@pytest.mark.parametrize("interpolation", ["hermite", "linear"])
def test_missing_values_filled_exactly_as_torchcde(interpolation):
    """The vectorized NaN fill gives torchcde's coefficients: interior gaps, leading/trailing gaps, empty channels."""
    import torchcde

    torch.manual_seed(0)
    x = torch.randn(3, 9, 4)
    x[torch.rand_like(x) < 0.5] = float("nan")
    x[0, :, 2] = float("nan")
    x[1, :3, 1] = float("nan")
    x[2, -3:, 0] = float("nan")
    t = torch.linspace(1.0, 9.0, 9) ** 1.2
    reference = {"hermite": torchcde.hermite_cubic_coefficients_with_backward_differences,
                 "linear": torchcde.linear_interpolation_coeffs}[interpolation](x, t=t)
    assert torch.equal(spline_coefficients(t, x, interpolation), reference)
