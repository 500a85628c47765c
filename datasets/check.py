"""Plain functions behind ``ndebench datasets list`` and ``ndebench datasets check NAME`` (they print nothing).

``dataset_status`` only looks for files (cheap enough to run for every dataset); ``preflight_problems``
also parses what every file must hold (headers, counts, checksums) without loading the data, which is what
a sweep runs before Ray starts; ``check_dataset`` loads the dataset through its real loader and compares
counts, shapes and labels with the public archive.
"""
from __future__ import annotations

import os
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from ndebench.datasets import images, sepsis, speech_commands, uea
from ndebench.datasets.bundle import DatasetBundle, ImageBundle
from ndebench.datasets.files import CorruptFileError, MissingDataError, corrupt_file, resolve_data_dir
from ndebench.datasets.registry import create_dataset, list_datasets, split_name

DataDir = str | os.PathLike | None

# The public archives' sizes: samples (or raw files), classes, channels and length per sample.
EXPECTED: dict[str, dict[str, Any]] = {
    "synthetic": {"samples": 96, "classes": 3, "channels": 2, "length": 32},
    "speech_commands": {"samples": 34975, "classes": 10, "channels": 20, "length": 161},
    "sepsis": {"files": 40336, "classes": 2, "channels": 34, "length": 72},
    **{
        name: {"train": spec.sizes[0], "test": spec.sizes[1], "classes": spec.num_classes, "channels": 3,
               "image_size": spec.image_size}
        for name, spec in images.SPECS.items()
    },
}

LOCATORS: dict[str, Callable[[str | None, DataDir], str]] = {
    "uea": lambda member, data_dir: uea.locate(member, data_dir)[2],
    "synthetic": lambda member, data_dir: "generated in memory",
    "speech_commands": lambda member, data_dir: f"local files ({speech_commands.clip_files(data_dir)[0]})",
    "sepsis": lambda member, data_dir: f"local files ({sepsis.record_files(data_dir)[0]})",
    **{
        name: (lambda member, data_dir, spec=spec: f"local files ({images.locate_images(spec, data_dir)})")
        for name, spec in images.SPECS.items()
    },
}


def expected_shape(name: str) -> dict[str, Any]:
    """The public archive's sizes for dataset ``name`` (empty where unknown); reads no file."""
    family, member = split_name(name)
    if family == "uea":
        shape = uea.expected_shape(member)
        return {} if shape is None else dict(zip(("samples", "classes", "channels", "length"), shape))
    return EXPECTED[family]


def describe_shape(expected: dict[str, Any]) -> str:
    """One line: ``N x L x C, K classes`` for time series, ``train + test images CxHxW, K classes`` for images."""
    if not expected:
        return "unknown"
    if "image_size" in expected:
        h, w = expected["image_size"]
        images = f"{expected['train']} + {expected['test']} images"
        return f"{images} {expected['channels']}x{h}x{w}, {expected['classes']} classes"
    count = expected["samples"] if "samples" in expected else f"{expected['files']} records"
    length = expected["length"] if expected["length"] is not None else "L (unequal lengths)"
    return f"{count} x {length} x {expected['channels']}, {expected['classes']} classes"


def dataset_status(name: str, data_dir: DataDir = None) -> dict[str, Any]:
    """Whether ``name`` can be loaded from ``data_dir`` (see :func:`resolve_data_dir`) without reading it.

    Returns ``{"name", "available", "source", "shape", "expected", "problem", "data_dir"}``: ``source``
    says where it would load from (None when unavailable), ``problem`` is the "put these files here"
    message when files are missing.
    """
    family, member = split_name(name)
    status = {"name": name, "expected": expected_shape(name), "data_dir": str(resolve_data_dir(data_dir))}
    status["shape"] = describe_shape(status["expected"])
    try:
        status.update(available=True, source=LOCATORS[family](member, data_dir), problem=None)
    except MissingDataError as error:
        status.update(available=False, source=None, problem=str(error))
    return status


def dataset_statuses(data_dir: DataDir = None) -> list[dict[str, Any]]:
    """:func:`dataset_status` of every registered dataset, in :func:`list_datasets` order."""
    return [dataset_status(name, data_dir) for name in list_datasets()]


def _ts_layout(path: Path) -> tuple[int, int]:
    """``(samples, channels)`` of a ``.ts`` file from its header and one pass over its data lines."""
    samples, channels, in_data = 0, None, False
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                line = line.strip()
                if not in_data or not line or line.startswith(("#", "%")):
                    in_data = in_data or line.lower().startswith("@data")
                    continue
                count = line.count(":")  # channels are separated by ':', the label follows the last one
                if channels is None:
                    channels = count
                if count != channels or count == 0:
                    raise ValueError(f"line {number} has {count} channel(s), the first sample has {channels}")
                samples += 1
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise corrupt_file(path, error) from error
    if not samples:
        raise corrupt_file(path, ValueError("no @data section with samples"))
    return samples, channels


def _probe_uea(member: str, data_dir: DataDir) -> None:
    train_path, test_path, _ = uea.locate(member, data_dir)
    (_, train), (_, test) = _ts_layout(train_path), _ts_layout(test_path)
    if train != test:
        raise corrupt_file(test_path, ValueError(f"{test} channels, but {train_path.name} has {train}"))


def _probe_sepsis(member: str | None, data_dir: DataDir) -> None:
    for path in sepsis.record_files(data_dir)[1]:
        try:
            with open(path, encoding="utf-8") as handle:
                header = handle.readline().rstrip("\n").split("|")
        except (OSError, UnicodeDecodeError) as error:
            raise corrupt_file(path, error) from error
        if len(header) != sepsis.NUM_COLUMNS or header[sepsis.LABEL] != "SepsisLabel":
            raise corrupt_file(path, ValueError(f"header has {len(header)} columns, expected {sepsis.NUM_COLUMNS} "
                                                "ending in ICULOS|SepsisLabel"))


def _probe_speech(member: str | None, data_dir: DataDir) -> None:
    for path, _ in speech_commands.clip_files(data_dir)[1]:
        try:
            with wave.open(str(path)) as clip:
                layout = clip.getnchannels(), clip.getframerate()
        except (OSError, EOFError, wave.Error) as error:
            raise corrupt_file(path, error) from error
        if layout != (1, speech_commands.SAMPLE_RATE):
            raise CorruptFileError(f"{path}: expected mono {speech_commands.SAMPLE_RATE} Hz audio, got "
                                   f"{layout[0]} channel(s) at {layout[1]} Hz")


# What every dataset family's files must hold, read without loading the data (images: torchvision's MD5s).
PROBES: dict[str, Callable[[str | None, DataDir], None]] = {
    "uea": _probe_uea,
    "sepsis": _probe_sepsis,
    "speech_commands": _probe_speech,
    **{
        name: (lambda member, data_dir, spec=spec: images.find_corrupt_file(spec, images.locate_images(spec, data_dir)))
        for name, spec in images.SPECS.items()
    },
}


def preflight_problems(name: str, data_dir: DataDir = None) -> list[str]:
    """Problems that would stop every trial on dataset ``name``: missing files, or a file whose header, layout
    or checksum is wrong (named). Parses headers and counts only, so a sweep can run it before Ray starts."""
    status = dataset_status(name, data_dir)
    if not status["available"]:
        return [status["problem"]]
    family, member = split_name(name)
    try:
        PROBES.get(family, lambda member, data_dir: None)(member, data_dir)
    except (MissingDataError, CorruptFileError) as error:
        return [str(error)]
    return []


def check_dataset(name: str, data_dir: DataDir = None) -> list[str]:
    """Load ``name`` through its loader and list what is wrong (empty: all good).

    Missing, unreadable or corrupt files, a missing optional dependency, sample counts, lengths and
    channel counts that differ from the public archive, labels outside ``0..K-1``, classes absent from
    the training split, overlapping splits, and unexpected NaNs (only Sepsis has missing values).
    """
    expected = expected_shape(name)
    try:
        bundle = create_dataset(name, seed=0, data_dir=data_dir)
    except (MissingDataError, CorruptFileError, ImportError, ValueError) as error:
        return [str(error)]
    if isinstance(bundle, ImageBundle):
        return _check_images(bundle, expected)
    problems = _check_series(bundle, expected, missing_allowed=name == "sepsis")
    if "files" in expected:
        found = len(sepsis.record_files(data_dir)[1])
        if found != expected["files"]:
            problems.append(f"{found} record files, the archive has {expected['files']}")
    return problems


def _check_labels(targets: torch.Tensor, num_classes: int, split: str) -> list[str]:
    if targets.numel() == 0:
        return [f"the {split} split is empty"]
    if int(targets.min()) < 0 or int(targets.max()) >= num_classes:
        return [f"{split} labels outside 0..{num_classes - 1}: min {int(targets.min())}, max {int(targets.max())}"]
    return []


def _check_series(bundle: DatasetBundle, expected: dict[str, Any], missing_allowed: bool) -> list[str]:
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
    indices = torch.cat(list(bundle.extra["indices"].values()))
    if indices.unique().numel() != indices.numel():
        problems.append("the train/val/test splits overlap")
    return problems


def _check_images(bundle: ImageBundle, expected: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    spec = images.SPECS[bundle.name]
    n_train = len(bundle.train) + len(bundle.val)
    if n_train != expected["train"]:
        problems.append(f"{n_train} training images, the archive has {expected['train']}")
    if len(bundle.test) != expected["test"]:
        problems.append(f"{len(bundle.test)} test images, the archive has {expected['test']}")
    shape = (bundle.channels, *bundle.image_size)
    for part in ("train", "test"):
        dataset = getattr(bundle, part)
        if len(dataset):
            image, _ = dataset[0]
            if tuple(image.shape) != shape:
                problems.append(f"{part} images have shape {tuple(image.shape)}, expected {shape}")
        problems += _check_labels(spec.labels(dataset.base), bundle.num_classes, part)
    absent = sorted(set(range(bundle.num_classes)) - set(bundle.extra["train_labels"].tolist()))
    if absent:
        problems.append(f"classes {absent} have no training image")
    return problems
