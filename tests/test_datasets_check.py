"""``dataset_status`` / ``check_dataset`` (behind ``ndebench datasets``) and the preprocessing cache."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ndebench.datasets.cache import cache_path, cached
from ndebench.datasets.check import check_dataset, dataset_statuses, describe_shape
from ndebench.datasets.registry import list_datasets


def test_statuses_cover_every_dataset_without_files(tmp_path):
    statuses = {s["name"]: s for s in dataset_statuses(tmp_path)}
    assert list(statuses) == list_datasets()
    assert statuses["synthetic"]["available"] and statuses["uea/BasicMotions"]["available"]
    assert statuses["uea/BasicMotions"]["source"].startswith("sktime package")
    assert statuses["uea/BasicMotions"]["shape"] == "80 x 100 x 6, 4 classes"
    for name in ("uea/Car", "speech_commands", "sepsis", "cifar10", "cifar100", "svhn", "stl10"):
        assert not statuses[name]["available"] and statuses[name]["source"] is None
        assert str(tmp_path) in statuses[name]["problem"]
    assert statuses["cifar100"]["shape"] == "50000 + 10000 images 3x32x32, 100 classes"
    assert statuses["uea/JapaneseVowels"]["shape"] == "640 x L (unequal lengths) x 12, 9 classes"
    assert all(s["data_dir"] == str(tmp_path.resolve()) for s in statuses.values())


@pytest.mark.parametrize("name", ["synthetic", "uea/BasicMotions", "uea/JapaneseVowels"])
def test_check_passes_on_intact_data(name):
    assert check_dataset(name) == []


def test_check_reports_missing_files(tmp_path):
    problems = check_dataset("uea/Car", tmp_path)
    assert len(problems) == 1 and str(tmp_path / "Car" / "Car_TRAIN.ts") in problems[0]


def test_check_reports_counts_and_lengths_that_differ_from_the_archive(tmp_path):
    rng = np.random.default_rng(0)
    header = (
        "@problemName Coffee\n@timeStamps false\n@missing false\n@univariate true\n@equalLength true\n"
        "@seriesLength 9\n@classLabel true a b c\n@data\n"
    )
    for split in ("TRAIN", "TEST"):
        rows = [",".join(f"{v:.3f}" for v in rng.normal(size=9)) + f":{label}" for label in "abc" * 6]
        (tmp_path / "Coffee").mkdir(exist_ok=True)
        (tmp_path / "Coffee" / f"Coffee_{split}.ts").write_text(header + "\n".join(rows) + "\n")
    assert check_dataset("uea/Coffee", tmp_path) == [
        "36 samples, the archive has 56", "3 classes, the archive has 2", "length 9, the archive has 286",
    ]


def test_describe_shape_unknown():
    assert describe_shape({}) == "unknown"


def test_unreadable_cache_entry_is_rebuilt(tmp_path):
    path = cache_path(tmp_path, "demo", {"a": 1})
    assert path != cache_path(tmp_path, "demo", {"a": 2}) and path.parent.name == ".ndebench_cache"
    path.parent.mkdir()
    path.write_bytes(b"half-written")
    data, hit = cached(path, lambda: {"x": torch.arange(3)})
    assert not hit and torch.equal(data["x"], torch.arange(3))
    again, hit = cached(path, lambda: pytest.fail("rebuilt although cached"))
    assert hit and torch.equal(again["x"], torch.arange(3))


def test_unwritable_cache_only_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(UserWarning, match="could not write the preprocessing cache"):
        data, hit = cached(blocker / "sub" / "x.pt", lambda: {"x": torch.ones(1)})
    assert not hit and torch.equal(data["x"], torch.ones(1))
