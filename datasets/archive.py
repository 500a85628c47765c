"""The UEA & UCR archive's file formats for one set's train or test split: ``.ts`` (sktime's format, the
archive's 2018 release), ``.arff`` (Weka's, the multivariate release's other copy) and the UCR 2018 ``.tsv``
(one sample a line: the label, then the values, tab-separated; ``NaN`` pads the shorter series).

Each reader returns ``series[i][c]``, a 1-D float64 array per sample ``i`` and channel ``c`` (lengths may
differ), and the string labels ``(N,)``; a file it cannot read raises :class:`CorruptFileError` naming the file
(and, for ``.tsv``, the line).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from ndebench.datasets.files import corrupt_file

FORMATS = (".ts", ".arff", ".tsv")
# An archive set's name as its folder and files spell it (ECG200, Car, UWaveGestureLibraryX, Fungi, ...).
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")

Series = list[list[np.ndarray]]


def is_archive_name(name: str) -> bool:
    """Whether ``name`` can name an archive set (letters, digits, ``_`` and ``-``, a letter first)."""
    return NAME.fullmatch(name) is not None


def split_files(folder: Path, name: str) -> tuple[Path, Path] | None:
    """``(train, test)``: ``<folder>/<Name>_TRAIN<ext>`` and ``_TEST<ext>`` in the first format of
    :data:`FORMATS` with both files there; ``None`` when no format has both."""
    for suffix in FORMATS:
        train, test = folder / f"{name}_TRAIN{suffix}", folder / f"{name}_TEST{suffix}"
        if train.is_file() and test.is_file():
            return train, test
    return None


def read_split(path: Path) -> tuple[Series, np.ndarray]:
    """One split's series and labels, read by the file's suffix (:data:`FORMATS`)."""
    readers = {".ts": read_ts, ".arff": read_arff, ".tsv": read_tsv}
    series, labels = readers[path.suffix](path)
    if not series:
        raise corrupt_file(path, ValueError("no samples"))
    return series, labels


def read_ts(path: Path) -> tuple[Series, np.ndarray]:
    """A ``.ts`` file, read by sktime."""
    from sktime.datasets import load_from_tsfile

    try:
        frame, labels = load_from_tsfile(str(path), return_data_type="nested_univ")
        return _nested(frame), np.asarray(labels)
    except Exception as error:  # sktime raises many types (IOError, ValueError, TsFileParseException...)
        raise corrupt_file(path, error) from error


def read_arff(path: Path) -> tuple[Series, np.ndarray]:
    """An ``.arff`` file (univariate, or multivariate with a relational attribute), read by sktime."""
    from sktime.datasets import load_from_arff_to_dataframe

    try:
        frame, labels = load_from_arff_to_dataframe(str(path))
        return _nested(frame), np.asarray(labels)
    except Exception as error:  # noqa: BLE001 - sktime's parser raises many types
        raise corrupt_file(path, error) from error


def _nested(frame) -> Series:
    return [[np.asarray(cell, dtype=np.float64) for cell in row] for row in frame.itertuples(index=False)]


def read_tsv(path: Path) -> tuple[Series, np.ndarray]:
    """A UCR 2018 ``.tsv`` file: per line a label and at least one value; trailing ``NaN`` padding is dropped."""
    series, labels = [], []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                label, *fields = line.rstrip("\n").split("\t")
                try:
                    values = np.array(fields, dtype=np.float64)
                except ValueError as error:
                    raise ValueError(f"line {number}: {error}") from None
                finite = np.flatnonzero(~np.isnan(values))
                if not label.strip() or not len(finite):
                    raise ValueError(f"line {number}: expected a label and tab-separated values")
                series.append([values[:finite[-1] + 1]])
                labels.append(label.strip())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise corrupt_file(path, error) from error
    return series, np.asarray(labels)


def layout(path: Path) -> tuple[int, int]:
    """``(samples, channels)`` of a split file (a ``.ts`` file from its header and data lines, without sktime)."""
    if path.suffix == ".ts":
        return ts_layout(path)
    series, _ = read_split(path)
    channels = {len(sample) for sample in series}
    if len(channels) != 1:
        raise corrupt_file(path, ValueError(f"samples with {sorted(channels)} channels"))
    return len(series), channels.pop()


def ts_layout(path: Path) -> tuple[int, int]:
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
