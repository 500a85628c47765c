"""Natural-spline coefficients of paths with missing values, kept on disk (``natural_splines_kept_in``): a kept
entry is torchcde's result bit for bit, read back instead of fitted again; another path, grid or dtype gets its
own entry; a trial reads what an earlier trial of the same split wrote, and nothing is kept outside a data
directory."""
from __future__ import annotations

import pytest
import torch
import torchcde
from ndebench.datasets.cache import CACHE_FOLDER
from ndebench.models.timeseries import natural_splines_kept_in, spline_coefficients
from ndebench.platform.worker.build import build_trial
from ndebench.platform.worker.spec import TrialSpec

TIMES = torch.linspace(0, 1, 20)


def path_with_gaps(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(6, 20, 3)`` Gaussian values, about 30% of them NaN."""
    generator = torch.Generator().manual_seed(seed)
    path = torch.randn(6, 20, 3, generator=generator, dtype=dtype)
    path[torch.rand(path.shape, generator=generator) < 0.3] = float("nan")
    return path


def entries(root) -> list:
    return sorted((root / CACHE_FOLDER).glob("natural-spline-*.pt"))


@pytest.fixture
def fits(monkeypatch) -> list[int]:
    """Counts torchcde's natural-spline fits."""
    calls, fit = [], torchcde.natural_cubic_coeffs
    monkeypatch.setattr(torchcde, "natural_cubic_coeffs", lambda *a, **k: calls.append(1) or fit(*a, **k))
    return calls


def same(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_a_kept_spline_is_torchcdes_bit_for_bit_and_read_back_without_a_fit(tmp_path, fits):
    path = path_with_gaps(0)
    expected = torchcde.natural_cubic_coeffs(path, t=TIMES)
    with natural_splines_kept_in(tmp_path):
        first = spline_coefficients(TIMES, path, "natural")
        written = entries(tmp_path)
        again = spline_coefficients(TIMES, path.clone(), "natural")
    assert len(written) == 1 and entries(tmp_path) == written and len(fits) == 2  # the expected one and the first
    same(first, expected)
    same(again, expected)


def test_another_path_grid_or_dtype_gets_its_own_entry(tmp_path, fits):
    with natural_splines_kept_in(tmp_path):
        for path, times in [(path_with_gaps(0), TIMES), (path_with_gaps(1), TIMES),
                            (path_with_gaps(0), torch.linspace(0, 2, 20)),
                            (path_with_gaps(0, torch.float64), TIMES.double())]:
            same(spline_coefficients(times, path, "natural"), torchcde.natural_cubic_coeffs(path, t=times))
    assert len(entries(tmp_path)) == 4 and len(fits) == 8


def test_complete_paths_other_splines_and_calls_outside_the_block_keep_nothing(tmp_path, fits):
    complete = torch.randn(6, 20, 3)
    with natural_splines_kept_in(tmp_path):
        spline_coefficients(TIMES, complete, "natural")
        spline_coefficients(TIMES, path_with_gaps(0), "hermite")
        spline_coefficients(TIMES, path_with_gaps(0), "linear")
    spline_coefficients(TIMES, path_with_gaps(0), "natural")
    assert entries(tmp_path) == [] and len(fits) == 2


def trial(data_dir) -> TrialSpec:
    return TrialSpec(model="neural_cde", dataset="synthetic", regularizer="none", seed=3,
                     model_params={"hidden_size": 4}, dataset_options={"missing_rate": 0.3, "num_samples": 36},
                     data_dir=str(data_dir))


def test_a_trial_reads_the_splines_an_earlier_trial_of_its_splits_kept(tmp_path, fits):
    first = build_trial(trial(tmp_path))
    assert len(entries(tmp_path)) == 3 and len(fits) == 3  # train, validation, test
    second = build_trial(trial(tmp_path))
    assert len(fits) == 3
    for split in ("train", "val", "test"):
        same(second.feeds[split].inputs, first.feeds[split].inputs)


def test_a_trial_without_a_data_directory_keeps_nothing(tmp_path, fits):
    build_trial(trial(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists() and len(fits) == 3
