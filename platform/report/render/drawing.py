"""Which figures a report draws, and drawing many of them in parallel worker processes.

``report.figures`` (config key, ``ndebench report --figures``): ``all`` draws every per-(model, dataset)
figure (reliability diagram, per-seed plot, learning curves), ``summary`` only the per-model ones
(critical-difference diagrams) and the learning curves of pairs with a cell that did not learn, ``none``
no figure. ``auto`` (the default) is ``all`` below :data:`SUMMARY_FROM` (model, dataset) pairs and
``summary`` from there on; the report names the mode it used and why.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from ndebench.platform.common.choices import FIGURE_MODES
from ndebench.platform.record.schema import COUNTED_STATUSES

SUMMARY_FROM = 50
PARALLEL_FROM = 16
Job = tuple[Callable[..., Path], tuple[Any, ...]]


def pair_count(runs: pd.DataFrame) -> int:
    """The (model, dataset) pairs of the runs the statistics count."""
    return len(runs.loc[runs["status"].isin(COUNTED_STATUSES), ["model", "dataset"]].drop_duplicates())


def figure_mode(setting: str, pairs: int) -> tuple[str, str]:
    """The mode ``setting`` resolves to for a study of ``pairs`` (model, dataset) pairs, and a sentence
    saying so for the report."""
    if setting not in FIGURE_MODES:
        raise ValueError(f"report.figures {setting!r} is not one of {', '.join(FIGURE_MODES)}")
    if setting != "auto":
        return setting, f"Figures: {setting} (report.figures: {setting}; {pairs} (model, dataset) pairs)."
    mode = "all" if pairs < SUMMARY_FROM else "summary"
    why = "below" if mode == "all" else "at or above"
    return mode, (f"Figures: {mode} (report.figures: auto; {pairs} (model, dataset) pairs, {why} {SUMMARY_FROM}; "
                  "set report.figures or --figures to choose).")


def _call(job: Job) -> Path:
    function, args = job
    return function(*args)


def draw(jobs: list[Job], workers: int | None = None) -> list[Path]:
    """Run each ``(function, args)`` figure job, returning the paths in job order: in this process for fewer
    than :data:`PARALLEL_FROM` jobs, else in a pool of ``workers`` (default: the CPUs, at most 8) processes.

    Figures are ``matplotlib.figure.Figure`` objects saved with the Agg canvas, so workers share no state;
    they are spawned, not forked, as the parent may hold MLflow's threads and connections."""
    if len(jobs) < PARALLEL_FROM:
        return [_call(job) for job in jobs]
    workers = workers or min(os.cpu_count() or 1, 8)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_call, jobs, chunksize=max(1, len(jobs) // (4 * workers))))
