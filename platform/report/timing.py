"""Compute time: seconds per training epoch with and without Continuum Dropout (the paper's Tables 7 and 15).

Each run's time is the mean over its epochs of ``train_time_s`` (the training pass only, no validation
Monte Carlo). A cell is the mean (sample std) of that per-run time over the ``ok`` seeds; the ratio divides
it by the baseline ``none`` cell of the same (model, dataset). Runs logged before ``train_time_s`` existed
fall back to ``epoch_time_s``, which includes validation, and the caption says so.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from ndebench.platform.report.render.sections import Cell, Section, mean_std
from ndebench.platform.report.statistics import stats
from ndebench.regularizers.none import BASELINE

REGULARIZER = "continuum_dropout"


def time_column(runs: pd.DataFrame) -> str | None:
    """``train_time_s`` when any run has it, else ``epoch_time_s``, else None (no timings logged)."""
    for column in ("train_time_s", "epoch_time_s"):
        if column in runs and np.isfinite(runs[column].astype(float)).any():
            return column
    return None


def time_cells(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (model, dataset, label) of ``none`` and Continuum Dropout: ``n, mean, std`` of the per-run
    seconds per epoch, the cell's own ``p, m`` (a tuned cell's differ by model and dataset) and ``ratio`` (mean
    over the baseline's mean)."""
    part = runs[runs["regularizer"].isin([BASELINE, REGULARIZER])]
    keys = ["model", "dataset", "label"]
    cells = stats.summarize_cells(part, column, keys)
    cells = cells.join(part.groupby(keys)[["p", "m"]].first(), on=keys)
    base = cells[cells["label"] == BASELINE].set_index(["model", "dataset"])["mean"]
    cells["ratio"] = [row.mean / base.get((row.model, row.dataset), np.nan) for row in cells.itertuples()]
    return cells


def time_sections(runs: pd.DataFrame) -> list[Section]:
    """One table per dataset: rows ``none`` and each Continuum Dropout cell (with its p and m), columns models,
    cells "mean (std) x ratio". Where a row's p and m differ between models (the validation-selected cell),
    the p and m columns say "per model" and each cell names its own."""
    column = time_column(runs)
    if column is None or not (runs["regularizer"] == REGULARIZER).any():
        return []
    cells = time_cells(runs, column)
    sections = []
    for dataset, group in cells.groupby("dataset", sort=True):
        models = sorted(group["model"].unique())
        order = group.groupby("label")[["p", "m"]].min().fillna(-1.0)
        labels = sorted(order.index, key=lambda label: (label != BASELINE, *order.loc[label], label))
        by = group.set_index(["label", "model"])
        rows = []
        for label in labels:
            baseline = label == BASELINE
            settings = {(_number(p), _number(m)) for p, m in by.loc[label][["p", "m"]].itertuples(index=False)}
            shared = baseline or len(settings) == 1
            p, m = ("0", "–") if baseline else next(iter(settings)) if shared else ("per model", "per model")
            line = [Cell(label), Cell(p), Cell(m)]
            for model in models:
                if (label, model) not in by.index:
                    line.append(Cell("–"))
                    continue
                row = by.loc[(label, model)]
                text = mean_std(row["mean"], row["std"], int(row["n"]))
                if label != BASELINE and np.isfinite(row["ratio"]):
                    text += f" x{row['ratio']:.3f}"
                if not shared:
                    text += f" at p={_number(row['p'])}, m={_number(row['m'])}"
                line.append(Cell(text))
            rows.append(line)
        source = ("train_time_s: the training pass of each epoch only" if column == "train_time_s" else
                  "epoch_time_s, which includes the validation pass (these runs predate train_time_s)")
        caption = (f"Seconds per training epoch on {dataset}: mean (sample std) over the ok seeds of each run's "
                   f"mean over its epochs, from {source}; xR: ratio to {BASELINE} of the same model.")
        sections.append(Section(f"Compute time on {dataset}", ["regularizer", "p", "m", *models], rows, caption))
    return sections


def _number(value: float) -> str:
    return "–" if not np.isfinite(value) else f"{value:g}"
