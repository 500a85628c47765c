"""PhysioNet 2019 Sepsis from tiny fake training_setA/B folders of PSV files, through the real loader."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fakes import make_stays
from ndebench.datasets import sepsis
from ndebench.datasets.check import check_dataset
from ndebench.datasets.files import CorruptFileError, MissingDataError
from ndebench.datasets.protocol import NORM_EPS
from ndebench.datasets.registry import create_dataset, dataset_info


@pytest.fixture
def sepsis_dir(tmp_path):
    expected = make_stays(tmp_path, np.random.default_rng(0))
    return tmp_path, expected


def all_rows(bundle, field):
    return torch.cat([getattr(getattr(bundle, part), field) for part in ("train", "val", "test")])


def in_file_order(bundle, field):
    """Rows of ``field`` put back in record (file) order using the split indices."""
    order = torch.cat([bundle.extra["indices"][part] for part in ("train", "val", "test")])
    out = torch.empty_like(all_rows(bundle, field))
    out[order] = all_rows(bundle, field)
    return out


def test_first_72_hours_labels_and_filter(sepsis_dir):
    root, expected = sepsis_dir
    bundle = create_dataset("sepsis", seed=0, data_dir=root)
    assert len(bundle.train) + len(bundle.val) + len(bundle.test) == len(expected) == 59  # the 2-hour stay is dropped
    assert bundle.train.values.shape[1:] == (72, 34) and bundle.channels == 34
    assert torch.equal(bundle.times, torch.arange(1, 73, dtype=torch.float32)) and bundle.T == 72.0
    assert bundle.task == "binary" and bundle.num_classes == 2 and dataset_info("sepsis").metric == "auroc"
    targets = in_file_order(bundle, "targets")
    assert targets.tolist() == [int(label) for _, _, label in expected]
    assert targets[0] == 0  # sepsis onset at hour 80, after the first 72 hours
    values = in_file_order(bundle, "values")
    raw = torch.from_numpy(np.stack([v for v, _, _ in expected])).float()
    assert torch.equal(torch.isnan(values), torch.isnan(raw))
    assert torch.isnan(values[4, 3:5]).all()  # the ICULOS gap of stay 5 stays missing


def test_normalization_from_train_split_only(sepsis_dir):
    root, expected = sepsis_dir
    bundle = create_dataset("sepsis", seed=0, data_dir=root)
    raw = torch.from_numpy(np.stack([v for v, _, _ in expected]))
    train = raw[bundle.extra["indices"]["train"]].reshape(-1, 34)
    mean = train.nanmean(0)
    std = torch.stack([c[~torch.isnan(c)].std() for c in train.T])
    assert torch.allclose(bundle.extra["mean"].double(), mean, atol=1e-4)
    test_raw = raw[bundle.extra["indices"]["test"]]
    assert torch.allclose(bundle.test.values.double(), (test_raw - mean) / (std + NORM_EPS), atol=1e-4, equal_nan=True)


def test_observation_intensity_channels(sepsis_dir):
    root, _ = sepsis_dir
    plain = create_dataset("sepsis", seed=0, data_dir=root)
    oi = create_dataset("sepsis", seed=0, data_dir=root, oi=True)
    assert oi.channels == 68 and oi.train.values.shape[2] == 68
    values, counts = oi.train.values[..., :34], oi.train.values[..., 34:]
    assert torch.equal(torch.isnan(values), torch.isnan(plain.train.values))
    assert not torch.isnan(counts).any()
    assert torch.equal(counts, torch.cumsum(~torch.isnan(values), dim=1).float())
    assert torch.equal(counts[:, -1], (~torch.isnan(values)).sum(1).float())


def test_static_features(sepsis_dir):
    root, expected = sepsis_dir
    plain = create_dataset("sepsis", seed=0, data_dir=root)
    oi = create_dataset("sepsis", seed=0, data_dir=root, oi=True)
    assert plain.train.static.shape[1] == 5 and oi.train.static.shape[1] == 7
    assert not torch.isnan(all_rows(oi, "static")).any()
    train_static = plain.train.static.double()
    assert torch.allclose(train_static.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-5)
    flags = in_file_order(oi, "static")[:, 5:]
    raw_units = np.stack([s for _, s, _ in expected])[:, 2:4]
    assert flags.tolist() == (~np.isnan(raw_units)).astype(float).tolist()
    assert torch.equal(in_file_order(oi, "static")[:, :5], in_file_order(plain, "static"))


def test_stratified_fixed_split_and_pos_weight(sepsis_dir):
    root, _ = sepsis_dir
    a = create_dataset("sepsis", seed=0, data_dir=root)
    b = create_dataset("sepsis", seed=3, data_dir=root, pos_weight=10)
    for part in ("train", "val", "test"):
        assert torch.equal(a.extra["indices"][part], b.extra["indices"][part])
    n = 59
    assert sorted(torch.cat(list(a.extra["indices"].values())).tolist()) == list(range(n))
    assert len(a.train) in (math.floor(0.7 * n), math.ceil(0.7 * n))
    positives = int(a.train.targets.sum())
    assert a.extra["pos_weight"] == pytest.approx((len(a.train) - positives) / positives)
    assert b.extra["pos_weight"] == 10.0


def test_cache_reused(sepsis_dir, monkeypatch):
    root, _ = sepsis_dir
    first = create_dataset("sepsis", seed=0, data_dir=root)
    assert first.extra["cache"]["hit"] is False

    def no_reading(path):
        raise AssertionError(f"read {path} although the cache exists")

    monkeypatch.setattr(sepsis, "read_record", no_reading)
    second = create_dataset("sepsis", seed=0, data_dir=root, oi=True)
    assert second.extra["cache"]["hit"] is True and second.extra["cache"]["path"] == first.extra["cache"]["path"]
    assert torch.allclose(second.train.values[..., :34], first.train.values, equal_nan=True)


def test_missing_folders_are_named(tmp_path):
    with pytest.raises(MissingDataError) as info:
        create_dataset("sepsis", seed=0, data_dir=tmp_path)
    assert str(tmp_path / "training_setA" / "p*.psv") in str(info.value)
    assert str(tmp_path / "training_setB" / "p*.psv") in str(info.value)


def test_truncated_psv_names_the_file(sepsis_dir):
    root, _ = sepsis_dir
    bad = root / "training_setB" / "p000045.psv"
    bad.write_text(bad.read_text()[:700])
    with pytest.raises(CorruptFileError, match=str(bad)):
        create_dataset("sepsis", seed=0, data_dir=root)


def test_check_reports_record_count(sepsis_dir):
    root, _ = sepsis_dir
    assert check_dataset("sepsis", root) == ["60 files, the archive has 40336"]
