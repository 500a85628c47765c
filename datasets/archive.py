"""The UEA & UCR archive's file formats for one set's train or test split: ``.ts`` (sktime's format, the
archive's 2018 release), ``.arff`` (Weka's, the multivariate release's other copy) and the UCR 2018 ``.tsv``
(one sample a line: the label, then the values, tab-separated; ``NaN`` pads the shorter series).

Each reader returns ``series[i][c]``, a 1-D float64 array per sample ``i`` and channel ``c`` (lengths may
differ), and the string labels ``(N,)``; a file it cannot read raises :class:`CorruptFileError` naming the file
(and, for ``.tsv``, the line).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
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
    for number, line in _lines(path):
        if not line.strip():
            continue
        label, *fields = line.rstrip("\n").split("\t")
        values = _floats(fields, path, number)
        finite = np.flatnonzero(~np.isnan(values))
        if not label.strip() or not len(finite):
            raise corrupt_file(path, ValueError("expected a label and tab-separated values"), number)
        series.append([values[:finite[-1] + 1]])
        labels.append(label.strip())
    return series, np.asarray(labels)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(number, line)`` of a text file, 1-based; an unreadable file raises :class:`CorruptFileError`."""
    number = 0
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):  # noqa: B007 - the number names the line that fails to decode
                yield number, line
    except OSError as error:
        raise corrupt_file(path, error) from error
    except UnicodeDecodeError as error:
        raise corrupt_file(path, error, number + 1) from error


def _floats(fields: list[str], path: Path, number: int) -> np.ndarray:
    """The numbers of line ``number``; ``?`` (the archive's missing value) reads as NaN."""
    try:
        return np.array(["nan" if f.strip() == "?" else f for f in fields], dtype=np.float64)
    except ValueError as error:
        raise corrupt_file(path, error, number) from None


def layout(path: Path) -> tuple[int, int]:
    """``(samples, channels)`` of a split file, every value parsed (a ``.ts`` file without sktime; an ``.arff``
    file's data lines first, then by sktime); a value that is no number is named with its file and line."""
    if path.suffix == ".ts":
        return ts_layout(path)
    if path.suffix == ".arff":
        arff_values(path)
    series, _ = read_split(path)
    channels = {len(sample) for sample in series}
    if len(channels) != 1:
        raise corrupt_file(path, ValueError(f"samples with {sorted(channels)} channels"))
    return len(series), channels.pop()


def ts_layout(path: Path) -> tuple[int, int]:
    """``(samples, channels)`` of a ``.ts`` file from its header and one pass over its data lines, each value
    parsed (``?`` is missing; a file with ``@timestamps true`` is checked for its channel count only)."""
    samples, channels, in_data, stamped = 0, None, False, False
    for number, line in _lines(path):
        line = line.strip()
        if not in_data or not line or line.startswith(("#", "%")):
            stamped = stamped or line.lower().replace(" ", "") == "@timestampstrue"
            in_data = in_data or line.lower().startswith("@data")
            continue
        *parts, _label = line.split(":")  # channels are separated by ':', the label follows the last one
        if channels is None:
            channels = len(parts)
        if len(parts) != channels or not parts:
            raise corrupt_file(path, ValueError(f"{len(parts)} channel(s), the first sample has {channels}"), number)
        if not stamped:
            for part in parts:
                _floats(part.split(","), path, number)
        samples += 1
    if not samples:
        raise corrupt_file(path, ValueError("no @data section with samples"))
    return samples, channels


def arff_values(path: Path) -> None:
    """Every value of an ``.arff`` file's data lines is a number or ``?`` (a multivariate file's relational
    value, quoted, holds its channels separated by ``\\n``); the class, after the last comma, is not read."""
    in_data = False
    for number, line in _lines(path):
        line = line.strip()
        if not in_data or not line or line.startswith("%"):
            in_data = in_data or line.lower().startswith("@data")
            continue
        values = line.rpartition(",")[0].replace("\\n", ",").replace("'", "").replace('"', "")
        _floats(values.split(","), path, number)
