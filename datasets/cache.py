"""On-disk cache of expensive preprocessing (MFCCs, parsed PSV records), keyed by its parameters.

Files live in ``<data_dir>/.ndebench_cache/<name>-<hash>.pt``, the hash covering every parameter that
changes the result (including a fingerprint of the raw files), so a changed option or changed raw data
gets a new entry and an old entry is never read by mistake.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

CACHE_FOLDER = ".ndebench_cache"


def fingerprint(root: Path, paths: Iterable[Path]) -> str:
    """Hash of the files' paths relative to ``root`` and their sizes (cheap: no file is read)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path.relative_to(root)}:{path.stat().st_size}\n".encode())
    return digest.hexdigest()


def cache_path(data_dir: Path, name: str, params: dict) -> Path:
    """``<data_dir>/.ndebench_cache/<name>-<first 16 hex digits of sha256(params as sorted JSON)>.pt``."""
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    return data_dir / CACHE_FOLDER / f"{name}-{key}.pt"


def cached(path: Path, build: Callable[[], dict[str, torch.Tensor]]) -> tuple[dict[str, torch.Tensor], bool]:
    """Load ``path`` if it exists, else ``build()`` and save it; returns ``(tensors, was_cached)``.

    The file is written to a temporary name and renamed, so parallel trials that build at the same
    time never read a half-written cache. A cached file is memory-mapped: its pages are read from disk on
    demand and shared through the OS page cache by the trials of one node, instead of each trial holding
    its own copy. An unreadable cache entry is rebuilt; a data directory that is not writable only costs
    the cache (with a warning).
    """
    if path.is_file():
        try:
            return torch.load(path, weights_only=True, mmap=True), True
        except Exception:  # a cache entry from an interrupted write or another torch version: rebuild it
            pass
    data = build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save(data, temporary)
        os.replace(temporary, path)
    except OSError as error:
        warnings.warn(f"could not write the preprocessing cache {path}: {error}", stacklevel=2)
    return data, False
