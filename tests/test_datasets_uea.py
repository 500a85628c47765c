"""UEA/UCR and synthetic datasets: the reference protocol (split, missing rate, normalization, labels)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from fakes import write_ts
from ndebench.datasets.archive import read_ts
from ndebench.datasets.files import CorruptFileError, MissingDataError, resolve_data_dir
from ndebench.datasets.protocol import NORM_EPS, resample_series
from ndebench.datasets.registry import create_dataset, list_datasets
from ndebench.datasets.uea import PAPER_SETS, load_uea_arrays, locate, shipped_sets


def all_values(bundle) -> torch.Tensor:
    return torch.cat([bundle.train.values, bundle.val.values, bundle.test.values])


def all_targets(bundle) -> torch.Tensor:
    return torch.cat([bundle.train.targets, bundle.val.targets, bundle.test.targets])


@pytest.fixture
def coffee_dir(tmp_path):
    """A tiny 'Coffee' (not shipped by sktime) with 2 channels, length 6, labels 'x'/'y' in both files."""
    rng = np.random.default_rng(0)
    for split, n in (("TRAIN", 20), ("TEST", 20)):
        labels = ["x", "y"] * (n // 2)
        samples = [rng.normal(size=(2, 6)) + (3.0 if lab == "y" else 0.0) for lab in labels]
        write_ts(tmp_path / "Coffee" / f"Coffee_{split}.ts", samples, labels)
    return tmp_path


@pytest.mark.parametrize("name", ["synthetic", "uea/BasicMotions"])
def test_split_sizes_disjoint_and_stratified(name):
    bundle = create_dataset(name, seed=0)
    idx = bundle.extra["indices"]
    n = len(all_targets(bundle))
    assert len(idx["train"]) == math.ceil(0.7 * n) or len(idx["train"]) == math.floor(0.7 * n)
    assert abs(len(idx["val"]) - len(idx["test"])) <= 1
    joined = torch.cat(list(idx.values()))
    assert sorted(joined.tolist()) == list(range(n))
    targets = all_targets(bundle)
    for k in range(bundle.num_classes):
        n_k = int((targets == k).sum())
        in_train = int((bundle.train.targets == k).sum())
        assert math.floor(0.7 * n_k) - 1 <= in_train <= math.ceil(0.7 * n_k) + 1
        for split in (bundle.val, bundle.test):
            assert math.floor(0.15 * n_k) - 1 <= int((split.targets == k).sum()) <= math.ceil(0.15 * n_k) + 1


def test_same_seed_same_split_other_seed_other_split():
    a, b, c = (create_dataset("uea/BasicMotions", seed=s) for s in (3, 3, 4))
    for part in ("train", "val", "test"):
        assert torch.equal(a.extra["indices"][part], b.extra["indices"][part])
        assert torch.equal(getattr(a, part).values, getattr(b, part).values)
    assert not torch.equal(a.extra["indices"]["train"], c.extra["indices"]["train"])


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.5, 0.7])
def test_missing_rate_drops_exactly_floor_rate_L_per_sample_and_channel(rate):
    bundle = create_dataset("uea/BasicMotions", seed=1, missing_rate=rate)
    values = all_values(bundle)
    per_channel = torch.isnan(values).sum(dim=1)
    assert torch.all(per_channel == math.floor(rate * values.shape[1]))


def test_missing_pattern_follows_seed():
    a, b, c = (create_dataset("synthetic", seed=s, missing_rate=0.5) for s in (2, 2, 5))
    assert torch.equal(torch.isnan(a.train.values), torch.isnan(b.train.values))
    assert not torch.equal(torch.isnan(a.train.values), torch.isnan(c.train.values))


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5])
def test_missing_rate_outside_unit_interval_is_an_error(rate):
    with pytest.raises(ValueError, match=re.escape(repr(rate))):
        create_dataset("synthetic", seed=0, missing_rate=rate)


@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_normalization_uses_train_statistics_only(rate):
    bundle = create_dataset("uea/BasicMotions", seed=2, missing_rate=rate)
    train = bundle.train.values.double().reshape(-1, bundle.channels)
    for c in range(bundle.channels):
        observed = train[:, c][~torch.isnan(train[:, c])]
        std = float(bundle.extra["std"][c])
        assert abs(float(observed.mean())) < 1e-6
        assert float(observed.std()) == pytest.approx(std / (std + NORM_EPS), abs=1e-6)
    raw, _, _ = load_uea_arrays("BasicMotions")
    mean, std = bundle.extra["mean"].double(), bundle.extra["std"].double()
    raw_train = raw[bundle.extra["indices"]["train"]].masked_fill(torch.isnan(bundle.train.values), float("nan"))
    assert torch.allclose(mean, raw_train.reshape(-1, 6).nanmean(0), atol=1e-5)
    if rate == 0.0:
        for part in ("val", "test"):
            expected = (raw[bundle.extra["indices"][part]] - mean) / (std + NORM_EPS)
            assert torch.allclose(getattr(bundle, part).values.double(), expected, atol=1e-5)


def test_labels_mapped_to_sorted_unique_order():
    bundle = create_dataset("uea/BasicMotions", seed=0)
    assert bundle.extra["classes"] == ["badminton", "running", "standing", "walking"]
    _, labels, _ = load_uea_arrays("BasicMotions")
    for part in ("train", "val", "test"):
        names = [bundle.extra["classes"][k] for k in getattr(bundle, part).targets.tolist()]
        assert names == labels[bundle.extra["indices"][part].numpy()].tolist()


def test_string_labels_sort_as_strings_like_the_reference():
    bundle = create_dataset("uea/PLAID", seed=0)
    assert bundle.extra["classes"][:3] == ["0", "1", "10"]


def test_unequal_lengths_resampled_to_maximum_length():
    train_path, test_path, _ = locate("JapaneseVowels")
    series = read_ts(train_path)[0] + read_ts(test_path)[0]
    lengths = {len(channel) for sample in series for channel in sample}
    assert len(lengths) > 1
    bundle = create_dataset("uea/JapaneseVowels", seed=0)
    assert bundle.train.values.shape[1:] == (max(lengths), 12)
    assert torch.equal(bundle.times, torch.linspace(0, 1, max(lengths)))
    assert not torch.isnan(all_values(bundle)).any()


def test_resampling_keeps_endpoints_and_linear_shapes():
    short = [np.linspace(2.0, 5.0, 4), np.array([1.0, -1.0])]
    out = resample_series([short, [np.zeros(7), np.ones(7)]])
    assert out.shape == (2, 7, 2)
    np.testing.assert_allclose(out[0, :, 0], np.linspace(2.0, 5.0, 7))
    np.testing.assert_allclose(out[0, :, 1], np.linspace(1.0, -1.0, 7))
    np.testing.assert_array_equal(out[1, :, 1], np.ones(7))


def test_a_member_that_cannot_name_a_set_lists_valid_names():
    with pytest.raises(KeyError, match="valid: ACSF1, ArrowHead, ArticularyWordRecognition, BasicMotions"):
        create_dataset("uea/No/Such", seed=0)


def test_members_cover_paper_and_shipped_sets():
    names = set(list_datasets())
    assert len(PAPER_SETS) == 30
    assert {f"uea/{n}" for n in PAPER_SETS + shipped_sets()} <= names
    assert {"ArrowHead", "BasicMotions", "GunPoint", "ItalyPowerDemand", "JapaneseVowels"} <= set(shipped_sets())
    assert "Tecator" not in shipped_sets()  # a regression set


def test_non_shipped_set_without_files_names_the_folder_and_files(tmp_path):
    with pytest.raises(MissingDataError) as info:
        create_dataset("uea/Car", seed=0, data_dir=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "Car" / "Car_TRAIN.ts") in message
    assert str(tmp_path / "Car" / "Car_TEST.ts") in message


def test_local_ts_files_load_through_data_dir(coffee_dir):
    bundle = create_dataset("uea/Coffee", seed=0, data_dir=coffee_dir, missing_rate=0.5)
    assert bundle.source.startswith("local files") and str(coffee_dir / "Coffee") in bundle.source
    assert bundle.channels == 2 and bundle.num_classes == 2 and bundle.extra["classes"] == ["x", "y"]
    assert len(bundle.train) + len(bundle.val) + len(bundle.test) == 40
    assert torch.all(torch.isnan(all_values(bundle)).sum(1) == 3)


def test_data_dir_precedence(coffee_dir, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NDEBENCH_DATA_DIR", str(coffee_dir))
    assert resolve_data_dir(None) == coffee_dir.resolve()
    assert create_dataset("uea/Coffee", seed=0).num_classes == 2
    other = tmp_path_factory.mktemp("other")
    assert resolve_data_dir(other) == other.resolve()
    with pytest.raises(MissingDataError, match=str(other)):
        create_dataset("uea/Coffee", seed=0, data_dir=other)
    monkeypatch.delenv("NDEBENCH_DATA_DIR")
    monkeypatch.chdir(other)
    assert resolve_data_dir(None) == other.resolve() / "data"


def test_corrupt_ts_file_is_named(coffee_dir):
    bad = coffee_dir / "Coffee" / "Coffee_TEST.ts"
    bad.write_text(bad.read_text()[:300] + "\n1.0,abc:oops\n")
    with pytest.raises(CorruptFileError, match=str(bad)):
        create_dataset("uea/Coffee", seed=0, data_dir=coffee_dir)


@pytest.mark.parametrize("name", shipped_sets())
def test_every_shipped_set_loads_offline(name):
    bundle = create_dataset(f"uea/{name}", seed=0)
    n = len(bundle.train) + len(bundle.val) + len(bundle.test)
    values = all_values(bundle)
    assert values.dtype == torch.float32 and values.shape == (n, len(bundle.times), bundle.channels)
    assert not torch.isnan(values).any()
    assert set(all_targets(bundle).tolist()) == set(range(bundle.num_classes))
    assert bundle.T == 1.0 and bundle.source.startswith("sktime package")


def test_synthetic_is_deterministic_balanced_and_shaped():
    a, b = create_dataset("synthetic", seed=7), create_dataset("synthetic", seed=7)
    assert torch.equal(all_values(a), all_values(b))
    assert all_values(a).shape == (96, 32, 2) and a.num_classes == 3
    assert torch.bincount(all_targets(a)).tolist() == [32, 32, 32]
    assert not torch.equal(all_values(a), all_values(create_dataset("synthetic", seed=8)))


def test_synthetic_classes_are_separable_by_their_frequency():
    """Nearest class-mean power spectrum classifies the test split well: the set is learnable."""
    bundle = create_dataset("synthetic", seed=0)

    def spectrum(split):
        return torch.fft.rfft(split.values[..., 0], dim=1).abs()[:, 1:5]

    centroids = torch.stack([spectrum(bundle.train)[bundle.train.targets == k].mean(0) for k in range(3)])
    predicted = torch.cdist(spectrum(bundle.test), centroids).argmin(1)
    assert (predicted == bundle.test.targets).float().mean() > 0.9
