"""Where dataset files live, and the errors for missing or unreadable ones.

Every dataset reads from one data directory, chosen by :func:`resolve_data_dir` in this order:
the explicit argument (``--data-dir`` or the config key ``data_dir``), the environment variable
``NDEBENCH_DATA_DIR``, then ``./data``. Nothing is ever downloaded.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

DATA_DIR_ENV = "NDEBENCH_DATA_DIR"
DEFAULT_DATA_DIR = "data"


class MissingDataError(FileNotFoundError):
    """Files a dataset needs are not on disk; the message says which files to put in which folder."""


class CorruptFileError(ValueError):
    """A dataset file exists but cannot be read (truncated, wrong format); the message names the file, and the
    line where it is known. ``path`` and ``line`` (1-based) hold them, ``None`` where not known."""

    def __init__(self, message: str, path: Path | None = None, line: int | None = None):
        super().__init__(message)
        self.path, self.line = path, line


def resolve_data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The absolute data directory: ``explicit`` if given, else ``$NDEBENCH_DATA_DIR``, else ``./data``."""
    chosen = explicit if explicit is not None else os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()


def missing_files(dataset: str, data_dir: Path, files: Iterable[str], origin: str) -> MissingDataError:
    """The "put these files here" error: ``files`` (paths relative to ``data_dir``) are needed for ``dataset``."""
    listing = "\n".join(f"  {data_dir / f}" for f in files)
    return MissingDataError(
        f"dataset {dataset!r} needs files that are not on disk. Put them here:\n{listing}\n"
        f"They come from {origin}. The data directory is {data_dir}; choose another with --data-dir, "
        f"the config key data_dir or ${DATA_DIR_ENV}."
    )


def corrupt_file(path: Path, error: BaseException, line: int | None = None) -> CorruptFileError:
    """Wrap a low-level read error into one that names the file, and ``line`` (1-based) where given:
    ``cannot read PATH, line 7: could not convert string to float: 'abc'``."""
    if line is None:
        return CorruptFileError(f"cannot read {path}: {type(error).__name__}: {error}", path)
    return CorruptFileError(f"cannot read {path}, line {line}: {error}", path, line)
