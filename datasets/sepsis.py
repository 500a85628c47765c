"""PhysioNet/CinC 2019 Sepsis: the first 72 ICU hours of each stay, label = sepsis at any of them."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from ndebench.datasets.bundle import DatasetBundle
from ndebench.datasets.cache import cache_path, cached, fingerprint
from ndebench.datasets.files import CorruptFileError, corrupt_file, missing_files, resolve_data_dir
from ndebench.datasets.protocol import build_bundle, stratified_split, zscore
from ndebench.datasets.registry import register_dataset

FOLDERS = ("training_setA", "training_setB")
HOURS = 72
NUM_FEATURES = 34
STATIC = ("Age", "Gender", "Unit1", "Unit2", "HospAdmTime")
NUM_COLUMNS = NUM_FEATURES + len(STATIC) + 2  # + ICULOS, SepsisLabel
ICULOS, LABEL = NUM_COLUMNS - 2, NUM_COLUMNS - 1
ORIGIN = (
    "the PhysioNet/CinC Challenge 2019 training data (physionet.org/content/challenge-2019: "
    "training_setA.zip and training_setB.zip, each extracted into its folder of p*.psv files)"
)


def record_files(data_dir: str | os.PathLike | None = None) -> tuple[Path, list[Path]]:
    """``(data_dir, sorted p*.psv files of both folders)``; a missing or empty folder is a :class:`MissingDataError`."""
    root = resolve_data_dir(data_dir)
    files, absent = [], []
    for folder in FOLDERS:
        found = sorted((root / folder).glob("p*.psv")) if (root / folder).is_dir() else []
        if not found:
            absent.append(f"{folder}/p*.psv")
        files += found
    if absent:
        raise missing_files("sepsis", root, absent, ORIGIN)
    return root, files


def probe(member: str | None = None, data_dir: str | os.PathLike | None = None) -> dict[str, int]:
    """The preflight check: every record's header has the 41 columns ending in ``ICULOS|SepsisLabel``.
    Returns ``{"files": number of records}`` for ``datasets check`` to compare with the archive's 40336."""
    files = record_files(data_dir)[1]
    for path in files:
        try:
            with open(path, encoding="utf-8") as handle:
                header = handle.readline().rstrip("\n").split("|")
        except (OSError, UnicodeDecodeError) as error:
            raise corrupt_file(path, error) from error
        if len(header) != NUM_COLUMNS or header[LABEL] != "SepsisLabel":
            raise corrupt_file(path, ValueError(f"header has {len(header)} columns, expected {NUM_COLUMNS} "
                                                "ending in ICULOS|SepsisLabel"))
    return {"files": len(files)}


def read_record(path: Path) -> tuple[np.ndarray, np.ndarray, float, int, int]:
    """One stay: ``values`` ``(72, 34)`` (row ``h - 1`` holds ICU hour ``h``, NaN where no row), the raw
    static row ``(5,)`` (Age, Gender, Unit1, Unit2, HospAdmTime), the label (max SepsisLabel over the kept
    hours), the number of kept hours (rows with ``1 <= ICULOS <= 72``) and the last kept hour (0 if none).
    """
    try:
        lines = path.read_text().splitlines()
        header = lines[0].split("|")
        if len(header) != NUM_COLUMNS or header[ICULOS] != "ICULOS" or header[LABEL] != "SepsisLabel":
            raise ValueError(f"expected {NUM_COLUMNS} columns ending in ICULOS|SepsisLabel, got {len(header)}")
        rows = np.array([line.split("|") for line in lines[1:] if line], dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != NUM_COLUMNS:
            raise ValueError(f"rows do not all have {NUM_COLUMNS} fields")
    except Exception as error:
        raise corrupt_file(path, error) from error
    hours = rows[:, ICULOS]
    kept = rows[(hours >= 1) & (hours <= HOURS)]
    values = np.full((HOURS, NUM_FEATURES), np.nan)
    values[kept[:, ICULOS].astype(int) - 1] = kept[:, :NUM_FEATURES]
    static = kept[0, NUM_FEATURES:ICULOS] if len(kept) else np.full(len(STATIC), np.nan)
    label = float(np.nanmax(kept[:, LABEL])) if len(kept) else 0.0
    last = int(kept[:, ICULOS].max()) if len(kept) else 0
    return values, static, label, len(kept), last


def _records(files: list[Path]) -> dict[str, torch.Tensor]:
    """Parse every file, keeping stays with more than 2 hours in the first 72 (as the reference)."""
    values, static, labels, final = [], [], [], []
    for path in files:
        v, s, label, hours, last = read_record(path)
        if hours > 2:
            values.append(v)
            static.append(s)
            labels.append(label > 0)
            final.append(last - 1)
    if not values:
        raise CorruptFileError(f"no stay with more than 2 hours among {len(files)} files")
    return {
        "values": torch.from_numpy(np.stack(values)).float(),
        "static": torch.from_numpy(np.stack(static)).float(),
        "targets": torch.tensor(labels, dtype=torch.long),
        "final_index": torch.tensor(final, dtype=torch.long),
    }


def static_features(raw: torch.Tensor, train_index: torch.Tensor, oi: bool) -> torch.Tensor:
    """``(N, 5)`` raw statics -> z-scored with train statistics; with ``oi`` two unnormalized flags
    ``Unit1 observed``, ``Unit2 observed`` are appended (``(N, 7)``). Missing Unit1/Unit2/HospAdmTime are
    0 before normalization (as the reference); any value still missing afterwards is 0 (the train mean).
    """
    flags = (~torch.isnan(raw[:, 2:4])).float()
    filled = raw.clone()
    filled[:, 2:5] = torch.nan_to_num(raw[:, 2:5], nan=0.0)
    normalized = torch.nan_to_num(zscore(filled, train_index)[0], nan=0.0)
    return torch.cat([normalized, flags], dim=1) if oi else normalized


@register_dataset("sepsis", summary="PhysioNet 2019 Sepsis, first 72 h, 34 channels (+34 intensity with oi), binary",
                  expected={"files": 40336, "classes": 2, "channels": 34, "length": 72},
                  locate=lambda member, data_dir: f"local files ({record_files(data_dir)[0]})", probe=probe,
                  missing_values=True, metric="auroc", display="PhysioNet Sepsis")
def sepsis(
    *, seed: int = 0, data_dir: str | os.PathLike | None = None, oi: bool = False, pos_weight: float | None = None
) -> DatasetBundle:
    """Binary task (sepsis at any of the first 72 ICU hours; AUROC is the metric).

    ``values`` ``(N, 72, 34)`` on the hourly grid ``times = 1, ..., 72`` (NaN where not measured, stays
    shorter than 72 hours padded with NaN), z-scored with train statistics; ``final_index`` holds each
    stay's last hour minus 1 (its last row's ``ICULOS``, as the reference's ``final_index = len - 1``), where
    models read the prediction, so a short stay is not extrapolated to hour 72; with ``oi`` the 34 cumulative
    observation counts are appended (``(N, 72, 68)``). ``static`` ``(N, 5)`` (``(N, 7)`` with ``oi``, see
    :func:`static_features`). Stratified 70/15/15 split with the fixed random states 0 and 1 of the
    reference, so ``seed`` does not change the split. ``extra["pos_weight"]`` is ``pos_weight`` if given
    (the reference uses 10), else negatives / positives in the train split. Parsed records are cached.
    """
    root, files = record_files(data_dir)
    params = {"dataset": "sepsis", "version": 2, "hours": HOURS, "files": fingerprint(root, files)}
    path = cache_path(root, "sepsis", params)
    data, hit = cached(path, lambda: _records(files))
    targets = data["targets"]
    split = stratified_split(targets, 0, 1)
    positives = int(targets[split[0]].sum())
    weight = float(pos_weight) if pos_weight is not None else (len(split[0]) - positives) / max(positives, 1)
    return build_bundle(
        "sepsis", data["values"], targets, times=torch.arange(1, HOURS + 1, dtype=torch.float32), split=split,
        source=f"local files ({root / FOLDERS[0]}, {root / FOLDERS[1]})", num_classes=2, task="binary",
        static=static_features(data["static"], split[0], bool(oi)), intensity=bool(oi), final_index=data["final_index"],
        extra={"classes": ["no sepsis", "sepsis"], "pos_weight": weight, "oi": bool(oi),
               "cache": {"path": str(path), "hit": hit}},
    )
