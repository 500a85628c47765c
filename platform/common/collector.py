"""The cyclic garbage collector's thresholds in the processes ndebench starts: a driver and its trial workers.

Each begins by importing torch, Ray Tune, MLflow and scikit-learn (and a worker, at its first optimizer, torch's
compiler stack): about a million objects that live as long as the process. Under CPython's default first
threshold (700 new container objects) the collector scans the young objects over and over while they are made:
about a fifth of a trial worker's start-up CPU. From a first threshold of 10,000 the scans cost little (measured in
docs/performance.md), and garbage in reference cycles is still found after at most 10,000 new container objects.
"""
from __future__ import annotations

import gc

START_THRESHOLDS = (10_000, 10, 10)


def for_startup() -> None:
    """Raise the collector's thresholds to :data:`START_THRESHOLDS` for the rest of this process (never lower
    them: a process that set its own higher ones keeps them)."""
    gc.set_threshold(*(max(now, wanted) for now, wanted in zip(gc.get_threshold(), START_THRESHOLDS, strict=True)))
