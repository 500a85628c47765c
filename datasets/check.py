"""Plain functions behind ``ndebench datasets list`` and ``ndebench datasets check NAME`` (they print nothing).

Everything comes from the dataset's registration (:class:`~ndebench.datasets.registry.DatasetInfo`):
``dataset_status`` only calls its ``locate`` (cheap enough to run for every dataset); ``preflight_problems``
also runs its ``probe``, which parses what every file must hold (headers, counts, checksums) without loading
the data, which is what a sweep runs before Ray starts; ``check_dataset`` loads the dataset through its real
loader and compares counts, shapes and labels with the registered ``expected`` sizes of the public archive.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from ndebench.datasets.bundle import DatasetBundle, ImageBundle
from ndebench.datasets.files import CorruptFileError, MissingDataError, resolve_data_dir
from ndebench.datasets.images import dataset_labels
from ndebench.datasets.registry import (
    DataDir,
    DatasetInfo,
    create_dataset,
    dataset_info,
    found_datasets,
    list_datasets,
)


def describe_shape(expected: Mapping[str, Any]) -> str:
    """One line: ``N x L x C, K classes`` for time series, ``train + test images CxHxW, K classes`` for images;
    ``?`` stands for a size the registration leaves out, ``unknown`` for none at all."""
    if not expected:
        return "unknown"
    classes = f", {expected['classes']} classes" if "classes" in expected else ""
    channels = expected.get("channels", "?")
    if "image_size" in expected:
        h, w = expected["image_size"]
        return f"{expected.get('train', '?')} + {expected.get('test', '?')} images {channels}x{h}x{w}{classes}"
    count = expected.get("samples", f"{expected['files']} records" if "files" in expected else "?")
    length = expected.get("length", "?")
    length = "L (unequal lengths)" if length is None else length
    return f"{count} x {length} x {channels}{classes}"


def dataset_status(name: str, data_dir: DataDir = None) -> dict[str, Any]:
    """Whether ``name`` can be loaded from ``data_dir`` (see :func:`resolve_data_dir`) without reading it.

    Returns ``{"name", "available", "source", "shape", "expected", "problem", "data_dir", "origin"}``: ``source``
    says where it would load from (None when unavailable), ``problem`` is the "put these files here"
    message when files are missing, ``origin`` is ``paper`` for one of the paper's sets, ``imported`` for one the
    registry does not list whose files are in the data directory (:func:`found_datasets`), else ``""``.
    An unknown name raises :class:`UnknownNameError` listing the valid ones.
    """
    info = dataset_info(name)
    status = {"name": name, "expected": dict(info.expected), "data_dir": str(resolve_data_dir(data_dir))}
    status["origin"] = "paper" if info.paper else "imported" if name not in list_datasets() else ""
    status["shape"] = describe_shape(info.expected)
    try:
        status.update(available=True, source=info.locate(info.member, data_dir), problem=None)
    except MissingDataError as error:
        status.update(available=False, source=None, problem=str(error))
    return status


def dataset_statuses(data_dir: DataDir = None) -> list[dict[str, Any]]:
    """:func:`dataset_status` of every registered dataset and of every set found in ``data_dir``
    (:func:`found_datasets`), by name."""
    return [dataset_status(name, data_dir) for name in sorted(list_datasets() + found_datasets(data_dir))]


def _probe(info: DatasetInfo, data_dir: DataDir) -> Mapping[str, int]:
    return (info.probe(info.member, data_dir) if info.probe is not None else None) or {}


def preflight_problems(name: str, data_dir: DataDir = None) -> list[str]:
    """Problems that would stop every trial on dataset ``name``: missing files, or a file whose header, layout
    or checksum is wrong (named). Parses headers and counts only, so a sweep can run it before Ray starts."""
    status = dataset_status(name, data_dir)
    if not status["available"]:
        return [status["problem"]]
    try:
        _probe(dataset_info(name), data_dir)
    except (MissingDataError, CorruptFileError) as error:
        return [str(error)]
    return []


def check_dataset(name: str, data_dir: DataDir = None) -> list[str]:
    """Run the preflight probe, load ``name`` through its loader and list what is wrong (empty: all good).

    Missing, unreadable or corrupt files, a missing optional dependency, counts the probe returns (e.g. record
    files), sample counts, lengths and channel counts that differ from the registered ``expected``, labels
    outside ``0..K-1``, classes absent from the training split, overlapping splits, and NaNs in a dataset
    registered without ``missing_values``.
    """
    info = dataset_info(name)
    expected = info.expected
    try:
        counted = _probe(info, data_dir)
        bundle = create_dataset(name, seed=0, data_dir=data_dir)
    except (MissingDataError, CorruptFileError, ImportError, ValueError) as error:
        return [str(error)]
    problems = [f"{counted[key]} {key}, the archive has {expected[key]}"
                for key in counted if key in expected and counted[key] != expected[key]]
    if isinstance(bundle, ImageBundle):
        return problems + _check_images(bundle, expected)
    return problems + _check_series(bundle, expected, info.missing_values)


def _check_labels(targets: torch.Tensor, num_classes: int, split: str) -> list[str]:
    if targets.numel() == 0:
        return [f"the {split} split is empty"]
    if int(targets.min()) < 0 or int(targets.max()) >= num_classes:
        return [f"{split} labels outside 0..{num_classes - 1}: min {int(targets.min())}, max {int(targets.max())}"]
    return []


def _check_series(bundle: DatasetBundle, expected: Mapping[str, Any], missing_allowed: bool) -> list[str]:
    problems: list[str] = []
    splits = {"train": bundle.train, "val": bundle.val, "test": bundle.test}
    n = sum(len(split) for split in splits.values())
    if "samples" in expected and n != expected["samples"]:
        problems.append(f"{n} samples, the archive has {expected['samples']}")
    if expected.get("classes") not in (None, bundle.num_classes):
        problems.append(f"{bundle.num_classes} classes, the archive has {expected['classes']}")
    if expected.get("channels") not in (None, bundle.channels):
        problems.append(f"{bundle.channels} channels, the archive has {expected['channels']}")
    if expected.get("length") not in (None, len(bundle.times)):
        problems.append(f"length {len(bundle.times)}, the archive has {expected['length']}")
    for part, split in splits.items():
        if split.values.shape[1:] != (len(bundle.times), bundle.channels):
            want = f"(N, {len(bundle.times)}, {bundle.channels})"
            problems.append(f"{part} values have shape {tuple(split.values.shape)}, expected {want}")
        problems += _check_labels(split.targets, bundle.num_classes, part)
        if not missing_allowed and torch.isnan(split.values).any():
            share = float(torch.isnan(split.values).float().mean())
            problems.append(f"{part} values are {share:.2%} NaN, the archive has no missing values")
    absent = sorted(set(range(bundle.num_classes)) - set(bundle.train.targets.tolist()))
    if absent:
        problems.append(f"classes {absent} have no training sample")
    indices = torch.cat(list(bundle.extra.get("indices", {}).values()) or [torch.zeros(0, dtype=torch.long)])
    if indices.unique().numel() != indices.numel():
        problems.append("the train/val/test splits overlap")
    return problems


def _check_images(bundle: ImageBundle, expected: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    n_train = len(bundle.train) + len(bundle.val)
    if expected.get("train") not in (None, n_train):
        problems.append(f"{n_train} training images, the archive has {expected['train']}")
    if expected.get("test") not in (None, len(bundle.test)):
        problems.append(f"{len(bundle.test)} test images, the archive has {expected['test']}")
    shape = (bundle.channels, *bundle.image_size)
    labels = {part: dataset_labels(getattr(bundle, part)) for part in ("train", "test")}
    for part, dataset in (("train", bundle.train), ("test", bundle.test)):
        if len(dataset):
            image, _ = dataset[0]
            if tuple(image.shape) != shape:
                problems.append(f"{part} images have shape {tuple(image.shape)}, expected {shape}")
        if labels[part] is not None:
            problems += _check_labels(labels[part], bundle.num_classes, part)
    if labels["train"] is not None:
        absent = sorted(set(range(bundle.num_classes)) - set(labels["train"].tolist()))
        if absent:
            problems.append(f"classes {absent} have no training image")
    return problems
