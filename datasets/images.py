"""CIFAR-10, CIFAR-100, SVHN and STL-10 from local torchvision folders (``download=False``, never fetched)."""
from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ndebench.datasets.bundle import ImageBundle
from ndebench.datasets.files import CorruptFileError, corrupt_file, missing_files, resolve_data_dir
from ndebench.datasets.registry import Metric, register_dataset
from torch.utils.data import Dataset

VAL_FRACTION = 0.2


@dataclass(frozen=True)
class ImageSpec:
    """How to open one torchvision dataset: its class, how to ask for a split, and its statistics.

    ``sizes`` are the archive's (train, test) image counts; ``mean``/``std`` the usual per-channel
    statistics of the training images on ``[0, 1]``; ``batch_size`` the paper's (App. D.3: 128, STL-10 64).
    """

    name: str
    class_name: str
    split_kwargs: Callable[[bool], dict[str, Any]]
    num_classes: int
    image_size: tuple[int, int]
    sizes: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    flip: bool
    metric: Metric
    origin: str
    batch_size: int = 128

    @property
    def cls(self) -> type:
        """The torchvision dataset class (imported on first use: torchvision is slow to import)."""
        return getattr(importlib.import_module("torchvision.datasets"), self.class_name)

    def files(self) -> list[tuple[str, str]]:
        """``(path relative to <data_dir>/<name>, md5)`` of every file torchvision checks."""
        cls = self.cls
        if hasattr(cls, "split_list"):
            return [(cls.split_list[s][1], cls.split_list[s][2]) for s in ("train", "test")]
        entries = cls.train_list + cls.test_list
        if hasattr(cls, "meta"):
            entries = entries + [[cls.meta["filename"], cls.meta["md5"]]]
        return [(f"{cls.base_folder}/{name}", md5) for name, md5 in entries]

    def expected(self) -> dict[str, Any]:
        """The registry's ``expected`` mapping: the archive's image counts, classes, channels and size."""
        return {"train": self.sizes[0], "test": self.sizes[1], "classes": self.num_classes, "channels": 3,
                "image_size": self.image_size}


SPECS = {
    spec.name: spec
    for spec in (
        ImageSpec("cifar10", "CIFAR10", lambda train: {"train": train}, 10, (32, 32), (50000, 10000),
                  (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), True, "accuracy",
                  "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz (extract it here)"),
        ImageSpec("cifar100", "CIFAR100", lambda train: {"train": train}, 100, (32, 32), (50000, 10000),
                  (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), True, "top5_accuracy",
                  "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz (extract it here)"),
        ImageSpec("svhn", "SVHN", lambda train: {"split": "train" if train else "test"}, 10, (32, 32),
                  (73257, 26032),
                  (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970), False, "accuracy",
                  "http://ufldl.stanford.edu/housenumbers/ (train_32x32.mat, test_32x32.mat)"),
        ImageSpec("stl10", "STL10", lambda train: {"split": "train" if train else "test"}, 10, (96, 96),
                  (5000, 8000),
                  (0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713), True, "accuracy",
                  "http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz (extract it here)", batch_size=64),
    )
}


class TransformedSubset(Dataset):
    """Rows ``indices`` of ``base`` (which yields PIL images) with ``transform`` applied on access."""

    def __init__(self, base: Dataset, indices: torch.Tensor, transform: Callable):
        self.base, self.indices, self.transform = base, indices, transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[int(self.indices[i])]
        return self.transform(image), int(label)


def dataset_labels(dataset: Any) -> torch.Tensor | None:
    """Class indices ``(N,)`` of a :class:`TransformedSubset` or a torchvision dataset (``targets`` for CIFAR,
    ``labels`` otherwise), read without decoding an image; None for a dataset that exposes neither."""
    if isinstance(dataset, TransformedSubset):
        labels = dataset_labels(dataset.base)
        return None if labels is None else labels[dataset.indices]
    raw = getattr(dataset, "targets", getattr(dataset, "labels", None))
    return None if raw is None else torch.as_tensor(np.asarray(raw)).long()


def image_root(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """``<data_dir>/<name>``, the ``root`` handed to torchvision."""
    return resolve_data_dir(data_dir) / name


def locate_images(spec: ImageSpec, data_dir: str | os.PathLike | None = None) -> Path:
    """The root folder ``<data_dir>/<name>``; :class:`MissingDataError` lists every absent file."""
    root = image_root(spec.name, data_dir)
    absent = [path for path, _ in spec.files() if not (root / path).is_file()]
    if absent:
        raise missing_files(spec.name, root.parent, [f"{spec.name}/{path}" for path in absent], spec.origin)
    return root


def find_corrupt_file(spec: ImageSpec, root: Path) -> None:
    """Raise :class:`CorruptFileError` naming the first file whose MD5 differs from torchvision's list."""
    # torchvision's own module-level check, so this and the dataset's check agree on what is intact
    check_integrity = importlib.import_module(spec.cls.__module__).check_integrity
    for path, md5 in spec.files():
        if not check_integrity(str(root / path), md5):
            raise CorruptFileError(f"{root / path} is corrupt or truncated (its MD5 is not {md5})")


def open_split(spec: ImageSpec, root: Path, train: bool) -> Dataset:
    """The torchvision dataset of one archive split (yielding PIL images).

    torchvision checks every file's MD5 itself; only when it refuses are the files checked one by one,
    so that the error names the bad file (or the folder, when every checksum matches but reading fails).
    """
    try:
        return spec.cls(root=str(root), download=False, **spec.split_kwargs(train))
    except Exception as error:
        find_corrupt_file(spec, root)
        raise corrupt_file(root, error) from error


CROP_PADDING = 4


def transforms(spec: ImageSpec, augment: bool) -> tuple[Callable, Callable]:
    """``(train, eval)`` transforms. Training: the standard CIFAR recipe, ``RandomCrop`` at the original size
    after zero-padding ``CROP_PADDING`` = 4 pixels per side, plus a horizontal flip except on SVHN (digits are
    not mirror-symmetric); App. D.3's "random resizing, cropping and flipping" does not give scales, and
    ``RandomResizedCrop``'s default 0.08-1 area range is an ImageNet recipe far harsher on 32 px images.
    Both then apply ``ToTensor`` and per-dataset mean/std normalization; images keep their native size.
    """
    from torchvision import transforms as T

    finish = [T.ToTensor(), T.Normalize(spec.mean, spec.std)]
    train = [T.RandomCrop(spec.image_size, padding=CROP_PADDING)] + ([T.RandomHorizontalFlip()] if spec.flip else [])
    return T.Compose((train if augment else []) + finish), T.Compose(finish)


def load_images(
    name: str, *, seed: int = 0, data_dir: str | os.PathLike | None = None, augment: bool = True
) -> ImageBundle:
    """Image set ``name`` from ``<data_dir>/<name>``: 20% of the archive's training images (a random
    permutation seeded by ``seed``) become the validation split, the archive's test images the test
    split. Items are ``(image (3, H, W) float32, label)``; training images are augmented (``augment``).
    """
    spec = SPECS[name]
    root = locate_images(spec, data_dir)
    train_base, test_base = open_split(spec, root, True), open_split(spec, root, False)
    n = len(train_base)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = round(VAL_FRACTION * n)
    val_index, train_index = order[:n_val].sort().values, order[n_val:].sort().values
    train_tf, eval_tf = transforms(spec, augment)
    labels = dataset_labels(train_base)
    if labels.numel() and (labels.min() < 0 or labels.max() >= spec.num_classes):
        raise corrupt_file(root, ValueError(f"labels outside 0..{spec.num_classes - 1}"))
    return ImageBundle(
        name=name,
        train=TransformedSubset(train_base, train_index, train_tf),
        val=TransformedSubset(train_base, val_index, eval_tf),
        test=TransformedSubset(test_base, torch.arange(len(test_base)), eval_tf),
        num_classes=spec.num_classes, channels=3, image_size=spec.image_size, source=f"local files ({root})",
        extra={"batch_size": spec.batch_size, "mean": spec.mean, "std": spec.std,
               "indices": {"train": train_index, "val": val_index}, "train_labels": labels},
    )


for _name, _spec in SPECS.items():
    _summary = f"{_name.upper()}: {_spec.num_classes} classes, {_spec.image_size[0]}x{_spec.image_size[1]} RGB images"
    register_dataset(
        _name, summary=_summary, input_kind="image", expected=_spec.expected(), metric=_spec.metric,
        display={"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "stl10": "STL-10"}.get(_name, _name.upper()),
        locate=lambda member, data_dir, spec=_spec: f"local files ({locate_images(spec, data_dir)})",
        probe=lambda member, data_dir, spec=_spec: find_corrupt_file(spec, locate_images(spec, data_dir)),
    )(functools.partial(load_images, _name))
