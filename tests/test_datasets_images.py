"""CIFAR-10/100, SVHN and STL-10 from tiny fake archives in torchvision's on-disk formats."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from fakes import MAKERS, SIZES
from ndebench.datasets import images
from ndebench.datasets.check import check_dataset, dataset_status
from ndebench.datasets.files import CorruptFileError, MissingDataError
from ndebench.datasets.registry import create_dataset, dataset_info
from torch.utils.data import DataLoader
from torchvision import transforms as T


@pytest.fixture(params=sorted(MAKERS))
def image_set(request, tmp_path, fake_md5):
    name = request.param
    pixels, labels = MAKERS[name](tmp_path, np.random.default_rng(0))
    fake_md5(tmp_path)
    return name, tmp_path, pixels, labels


def test_splits_shapes_and_labels(image_set):
    name, root, _, labels = image_set
    bundle = create_dataset(name, seed=0, data_dir=root)
    n_train, n_test = SIZES[name]
    spec = images.SPECS[name]
    assert len(bundle.val) == round(0.2 * n_train) and len(bundle.train) + len(bundle.val) == n_train
    assert len(bundle.test) == n_test
    train_index, val_index = bundle.extra["indices"]["train"], bundle.extra["indices"]["val"]
    assert sorted(torch.cat([train_index, val_index]).tolist()) == list(range(n_train))
    assert bundle.input_kind == "image" and bundle.channels == 3 and bundle.image_size == spec.image_size
    assert bundle.num_classes == spec.num_classes
    assert dataset_info(name).metric == ("top5_accuracy" if name == "cifar100" else "accuracy")
    image, label = bundle.val[0]
    assert image.shape == (3, *spec.image_size) and image.dtype == torch.float32
    assert label == labels[val_index[0]]
    assert bundle.extra["train_labels"].tolist() == labels.tolist()  # SVHN's 10 is digit 0, STL-10 is 1-based
    x, y = next(iter(DataLoader(bundle.train, batch_size=4)))
    assert x.shape == (4, 3, *spec.image_size) and y.shape == (4,)


def test_validation_images_are_normalized_and_not_augmented(image_set):
    name, root, pixels, _ = image_set
    bundle = create_dataset(name, seed=1, data_dir=root)
    spec = images.SPECS[name]
    index = int(bundle.extra["indices"]["val"][2])
    mean, std = torch.tensor(spec.mean)[:, None, None], torch.tensor(spec.std)[:, None, None]
    expected = (torch.from_numpy(pixels[index]).float() / 255 - mean) / std
    assert torch.allclose(bundle.val[2][0], expected, atol=1e-5)
    assert torch.equal(bundle.val[2][0], bundle.val[2][0])


def test_training_augmentation(image_set):
    """A training image is a window of the 4-pixel zero-padded original (flipped or not, never on SVHN)."""
    name, root, _, _ = image_set
    bundle = create_dataset(name, seed=0, data_dir=root)
    kinds = [type(t) for t in bundle.train.transform.transforms]
    assert kinds[0] is T.RandomCrop and bundle.train.transform.transforms[0].padding == 4
    assert bundle.train.transform.transforms[0].size == images.SPECS[name].image_size
    assert (T.RandomHorizontalFlip in kinds) == (name != "svhn")
    plain = create_dataset(name, seed=0, data_dir=root, augment=False)
    spec = images.SPECS[name]
    mean, std = torch.tensor(spec.mean)[:, None, None], torch.tensor(spec.std)[:, None, None]
    original = plain.train[0][0] * std + mean
    padded = torch.nn.functional.pad(original, (4, 4, 4, 4))
    h, w = spec.image_size
    windows = [padded[:, i:i + h, j:j + w] for i in range(9) for j in range(9)]
    candidates = windows + ([x.flip(-1) for x in windows] if spec.flip else [])
    torch.manual_seed(0)
    draws = [bundle.train[0][0] * std + mean for _ in range(4)]
    for image in draws:
        assert min(float((image - c).abs().max()) for c in candidates) < 1e-5
    assert not all(torch.equal(draws[0], d) for d in draws[1:])  # a fresh random crop on every access
    assert torch.equal(plain.train[0][0], plain.train[0][0])
    assert bundle.extra["batch_size"] == (64 if name == "stl10" else 128)


def test_validation_split_follows_seed(image_set):
    name, root, _, _ = image_set
    a, b, c = (create_dataset(name, seed=s, data_dir=root) for s in (0, 0, 1))
    assert torch.equal(a.extra["indices"]["val"], b.extra["indices"]["val"])
    assert not torch.equal(a.extra["indices"]["val"], c.extra["indices"]["val"])


def test_status_and_check_on_fake_files(image_set):
    name, root, _, _ = image_set
    status = dataset_status(name, root)
    assert status["available"] and str(root / name) in status["source"]
    n_train, n_test = SIZES[name]
    problems = check_dataset(name, root)
    spec = images.SPECS[name]
    assert f"{n_train} training images, the archive has {spec.sizes[0]}" in problems
    assert f"{n_test} test images, the archive has {spec.sizes[1]}" in problems
    assert not any("shape" in p or "labels outside" in p for p in problems)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_missing_files_are_listed(name, tmp_path):
    with pytest.raises(MissingDataError) as info:
        create_dataset(name, seed=0, data_dir=tmp_path)
    for path, _ in images.SPECS[name].files():
        assert str(tmp_path / name / path) in str(info.value)


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_truncated_file_is_named(name, tmp_path, fake_md5):
    MAKERS[name](tmp_path, np.random.default_rng(0))
    fake_md5(tmp_path)
    path, _ = images.SPECS[name].files()[1]
    target = tmp_path / name / path
    target.write_bytes(target.read_bytes()[: max(target.stat().st_size // 2, 1)] if target.stat().st_size else b"x")
    with pytest.raises(CorruptFileError, match=str(target)):
        create_dataset(name, seed=0, data_dir=tmp_path)


def test_unreadable_file_with_valid_checksum_names_the_folder(tmp_path, fake_md5):
    MAKERS["cifar10"](tmp_path, np.random.default_rng(0))
    (tmp_path / "cifar10" / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
    fake_md5(tmp_path)
    with pytest.raises(CorruptFileError, match=str(tmp_path / "cifar10")):
        create_dataset("cifar10", seed=0, data_dir=tmp_path)
