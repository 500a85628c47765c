"""The UEA & UCR archive's file formats for one set's train or test split: ``.ts`` (sktime's format, the
archive's 2018 release), ``.arff`` (Weka's, the multivariate release's other copy) and the UCR 2018 ``.tsv``
(one sample a line: the label, then the values, tab-separated; ``NaN`` pads the shorter series).

Each reader returns ``series[i][c]``, a 1-D float64 array per sample ``i`` and channel ``c`` (lengths may
differ), and the string labels ``(N,)``; a file it cannot read raises :class:`CorruptFileError` naming the file
(and, for ``.tsv`` and ``.arff``, the line). :func:`check_pair`, the sweep's check before Ray starts, parses both
files whole (``.ts`` line by line) and names the file and line of a value that is no number, a missing value
inside a series, a label outside the header's ``@classLabel``, a training split of one class and a test label
without a training sample.
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
INFINITE = "an infinite value, which no model trains on"
GAP = "a missing value (NaN) inside a series; the archive marks only the end of a shorter series so"


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
    """An ``.arff`` file (univariate, or multivariate with a relational attribute), read by sktime; a missing value
    (``?``) inside a series raises, naming its line."""
    from sktime.datasets import load_from_arff_to_dataframe

    try:
        frame, labels = load_from_arff_to_dataframe(str(path))
        series = _nested(frame)
    except Exception as error:  # noqa: BLE001 - sktime's parser raises many types
        raise corrupt_file(path, error) from error
    lines = data_lines(path)
    for index, sample in enumerate(series):
        if any(_gap(values) for values in sample):
            where = lines[index] if index < len(lines) else index + 1
            raise corrupt_file(path, ValueError(f"line {where}: {GAP}"))
    return series, np.asarray(labels)


def _nested(frame) -> Series:
    return [[np.asarray(cell, dtype=np.float64) for cell in row] for row in frame.itertuples(index=False)]


def read_tsv(path: Path) -> tuple[Series, np.ndarray]:
    """A UCR 2018 ``.tsv`` file: per line a label and at least one value; trailing ``NaN`` padding (the archive's
    mark of a shorter series) is dropped, a ``NaN`` before the last value raises, naming its line."""
    series, labels = [], []
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                line = _decoded(raw, number)
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
                if _gap(values) or np.isinf(values).any():
                    raise ValueError(f"line {number}: {GAP if _gap(values) else INFINITE}")
                series.append([values[:finite[-1] + 1]])
                labels.append(label.strip())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise corrupt_file(path, error) from error
    return series, np.asarray(labels)


def _decoded(raw: bytes, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"line {number}: not UTF-8 text (byte {error.start + 1} of the line)") from None


def _gap(values: np.ndarray) -> bool:
    """Whether a series has a missing value (NaN) before its last value: not the padding of a shorter series."""
    finite = np.flatnonzero(~np.isnan(values))
    return bool(len(finite)) and bool(np.isnan(values[:finite[-1] + 1]).any())


def data_lines(path: Path) -> list[int]:
    """The line numbers of a split file's samples, in order: every non-blank line of a ``.tsv``; the lines after
    ``@data`` that are neither blank nor comments in an ``.arff`` or ``.ts`` file."""
    numbers, in_data = [], path.suffix == ".tsv"
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if in_data and line and not line.startswith(("#", "%")):
                numbers.append(number)
            in_data = in_data or line.lower().startswith("@data")
    return numbers


def _ts_header(header: dict[str, list[str]], line: str) -> None:
    """Keep a ``.ts`` header line's values (``@classLabel true a b`` -> ``{"@classlabel": ["true", "a", "b"]}``)."""
    key, *values = line.split()
    header[key.lower()] = values


def _ts_values(text: str, number: int, channel: int, missing: bool) -> None:
    """Check one channel of a ``.ts`` data line: numbers separated by commas; ``?`` or ``NaN`` only with
    ``@missing true``, or as the padding at its end."""
    tokens = [t.strip() for t in text.split(",")]
    try:
        values = np.array(["nan" if t == "?" else t for t in tokens], dtype=np.float64)
    except ValueError:
        bad = next(t for t in tokens if t != "?" and not _number(t))
        raise ValueError(f"line {number}: value {bad[:40]!r} of channel {channel} is no number") from None
    if np.isinf(values).any():
        raise ValueError(f"line {number}: channel {channel}: {INFINITE}")
    if not missing and _gap(values):
        raise ValueError(f"line {number}: channel {channel}: {GAP} (the header has no @missing true)")


def _number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def ts_labels(path: Path) -> tuple[int, list[tuple[int, str]]]:
    """Check a ``.ts`` file in one pass over its lines, without sktime: one channel count for every sample, every
    value a number (a missing ``?``/``NaN`` inside a series only where the header says ``@missing true``), every
    label one of the header's ``@classLabel`` values. Returns the channel count and each sample's ``(line,
    label)``; raises :class:`CorruptFileError` naming the file and line."""
    samples: list[tuple[int, str]] = []
    channels, in_data, header = None, False, {}
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                line = _decoded(raw, number).strip()
                if not in_data or not line or line.startswith(("#", "%")):
                    if not in_data and line.startswith("@"):
                        _ts_header(header, line)
                    in_data = in_data or line.lower().startswith("@data")
                    continue
                count = line.count(":")  # channels are separated by ':', the label follows the last one
                if channels is None:
                    channels = count
                if count != channels or count == 0:
                    raise ValueError(f"line {number} has {count} channel(s), the first sample has {channels}")
                *fields, label = line.split(":")
                declared = header.get("@classlabel", [])
                if declared[:1] == ["true"] and label.strip() not in declared[1:]:
                    raise ValueError(f"line {number}: label {label.strip()[:40]!r} is not among the header's "
                                     f"@classLabel values {' '.join(declared[1:])}")
                if header.get("@timestamps", ["false"])[:1] != ["true"]:
                    missing = header.get("@missing", ["false"])[:1] == ["true"]
                    for channel, text in enumerate(fields, 1):
                        _ts_values(text, number, channel, missing)
                samples.append((number, label.strip()))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise corrupt_file(path, error) from error
    if not samples or channels is None:
        raise corrupt_file(path, ValueError("no @data section with samples"))
    return channels, samples


def split_labels(path: Path) -> tuple[int, list[tuple[int, str]]]:
    """A split file checked whole, in any of :data:`FORMATS`: its channel count and each sample's ``(line,
    label)``; raises :class:`CorruptFileError` naming the file (and the line) of what cannot be read."""
    if path.suffix == ".ts":
        return ts_labels(path)
    series, labels = read_split(path)
    channels = {len(sample) for sample in series}
    if len(channels) != 1:
        raise corrupt_file(path, ValueError(f"samples with {sorted(channels)} channels"))
    lines = data_lines(path)
    return channels.pop(), [(lines[i] if i < len(lines) else i + 1, str(label)) for i, label in enumerate(labels)]


def check_pair(train: Path, test: Path) -> None:
    """What every trial would stumble on, refused before any starts, naming the file and line: either file
    unreadable (:func:`split_labels`), different channel counts, a training split of one class, a test label with
    no training sample."""
    (train_channels, train_labels), (test_channels, test_labels) = split_labels(train), split_labels(test)
    if train_channels != test_channels:
        raise corrupt_file(test, ValueError(f"{test_channels} channels, but {train.name} has {train_channels}"))
    classes = {label for _, label in train_labels}
    if len(classes) < 2:
        raise corrupt_file(train, ValueError(f"every sample has label {classes.pop()!r}: a classifier needs two "
                                             "classes or more"))
    for number, label in test_labels:
        if label not in classes:
            raise corrupt_file(test, ValueError(f"line {number}: label {label[:40]!r} has no training sample in "
                                                f"{train.name} (labels there: {' '.join(sorted(classes))})"))
