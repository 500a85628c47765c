"""Paths read back from the tracking store, kept inside the sweep's storage root.

Anyone who can write to the tracking store can set a run's tags, so a tag is never trusted as a path: a trial
folder named by ``ndebench.trial_dir`` must have the shape the trainable writes (``<study>/<stage>-<time>/<trial
id>``) and, on a local filesystem, must still lie inside the storage root once symlinks are resolved.
"""
from __future__ import annotations

import os

import pyarrow.fs as pafs
from ndebench.platform.cluster.storage import Storage


class UnsafePathError(ValueError):
    """A path taken from the tracking store that would leave the storage root."""


def trial_folder(storage: Storage, study: str, relative: str) -> str:
    """The storage path of trial folder ``relative`` (``<study>/<stage>-<time>/<trial id>``), or
    :class:`UnsafePathError` naming the value and the expected shape."""
    parts = relative.split("/")
    bad = (len(parts) != 3 or parts[0] != study or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts))
    if bad:
        raise UnsafePathError(f"ndebench.trial_dir={relative!r} is not <study>/<stage>-<time>/<trial id> with study "
                              f"{study!r} inside the storage root {storage.display()}")
    path = storage.path(*parts)
    if isinstance(storage.fs, pafs.LocalFileSystem):
        root = os.path.realpath(storage.root)
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise UnsafePathError(f"ndebench.trial_dir={relative!r} resolves to {os.path.realpath(path)!r}, outside "
                                  f"the storage root {root!r}")
    return path


def inside_trial(storage: Storage, trial_path: str, path: str) -> str:
    """``path`` (a checkpoint file under the trial folder ``trial_path``, as :func:`trial_folder` returned it), or
    :class:`UnsafePathError` when, on a local filesystem, a symlinked ``checkpoint_*`` folder or file takes it
    outside that trial folder once symlinks are resolved."""
    if isinstance(storage.fs, pafs.LocalFileSystem):
        folder, real = os.path.realpath(trial_path), os.path.realpath(path)
        if os.path.commonpath([folder, real]) != folder:
            raise UnsafePathError(f"checkpoint {path!r} resolves to {real!r}, outside its trial folder {folder!r}")
    return path
