"""Accuracy against the number of Monte-Carlo passes at test time (the paper's Tables 13-14 and Fig. 4).

Built from the ``reevaluate`` runs of a study (each one trained evaluate run re-scored with ``n_mc`` passes,
see :mod:`~ndebench.platform.engine.reevaluate`). Per dataset and metric: a first row with the baseline ``none``
from its evaluate runs, then one row per regularizer and ``N_MC``; columns are models; a cell is the mean
(sample std) over the ok seeds; the best mean per column is bold. A figure per dataset draws the metric
against ``N_MC`` per model with the baseline's mean +- std band.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from ndebench.platform.report.render import tables
from ndebench.platform.report.render.sections import Cell, Section, mean_std, save_figure
from ndebench.platform.report.statistics import stats
from ndebench.regularizers.none import BASELINE

LABELS = {m: tables.LABELS[m] for m in ("test_accuracy", "test_top5_accuracy", "test_auroc")}


def mc_cells(reevaluated: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``n, mean, std`` per (model, dataset, label, n_mc) over the ok re-evaluated runs."""
    return stats.summarize_cells(reevaluated, metric, ["model", "dataset", "label", "n_mc"])


def _metrics(reevaluated: pd.DataFrame, dataset: str) -> list[str]:
    part = reevaluated[reevaluated["dataset"] == dataset]
    return [m for m in LABELS if m in part and np.isfinite(part[m].astype(float)).any()]


def mc_sections(reevaluated: pd.DataFrame, evaluated: pd.DataFrame, directory: Path) -> list[Section]:
    """One section (table and figure) per dataset and reported metric (accuracy, top-5 accuracy, AUROC)."""
    sections = []
    if reevaluated.empty:
        return sections
    for dataset in sorted(reevaluated["dataset"].unique()):
        for metric in _metrics(reevaluated, dataset):
            cells = mc_cells(reevaluated[reevaluated["dataset"] == dataset], metric)
            base = evaluated[(evaluated["dataset"] == dataset) & (evaluated["regularizer"] == BASELINE)]
            base_cells = (stats.summarize_cells(base, metric).set_index("model") if metric in base and len(base)
                          else pd.DataFrame(columns=["n", "mean", "std"]))
            models = sorted(cells["model"].unique())
            rows = [[Cell(BASELINE), Cell("–")] + [
                Cell(mean_std(base_cells.loc[m, "mean"], base_cells.loc[m, "std"], int(base_cells.loc[m, "n"])))
                if m in base_cells.index else Cell("–") for m in models]]
            by = cells.set_index(["label", "n_mc", "model"])
            keys = sorted({(label, n) for label, n in zip(cells["label"], cells["n_mc"], strict=True)})
            for label, n in keys:
                rows.append([Cell(label), Cell(str(n))] + [
                    Cell(mean_std(by.loc[(label, n, m), "mean"], by.loc[(label, n, m), "std"],
                                  int(by.loc[(label, n, m), "n"])))
                    if (label, n, m) in by.index else Cell("–") for m in models])
            for j, model in enumerate(models):
                column = [r[2 + j] for r in rows[1:]]
                means = [by.loc[(label, n, model), "mean"] if (label, n, model) in by.index else np.nan
                         for label, n in keys]
                finite = [round(float(x), 3) for x in means if np.isfinite(x)]
                for cell, mean in zip(column, means, strict=True):
                    cell.bold = bool(finite and np.isfinite(mean) and round(float(mean), 3) == max(finite))
            label_text = LABELS[metric]
            figure = _plot(cells, base_cells, models, dataset, label_text,
                           directory / f"mc_samples_{re.sub(r'[^A-Za-z0-9.-]+', '-', dataset)}_{metric}.png")
            caption = (f"Test {label_text} on {dataset} against the number of Monte-Carlo passes N_MC at test time, "
                       "re-scoring the same trained weights (no retraining): mean (sample std) over the ok seeds; "
                       f"first row: {BASELINE} (deterministic); bold: best per model.")
            sections.append(Section(f"MC samples: {label_text} on {dataset}",
                                    ["regularizer", "N_MC", *models], rows, caption, figure))
    return sections


def _plot(cells: pd.DataFrame, base: pd.DataFrame, models: list[str], dataset: str, ylabel: str,
          path: Path) -> list[Path]:
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot()
    for (model, label), frame in cells.groupby(["model", "label"], sort=True):
        frame = frame.sort_values("n_mc")
        handle = ax.errorbar(frame["n_mc"], frame["mean"], yerr=frame["std"].fillna(0.0), marker="o", capsize=3,
                             label=f"{model} ({label})")
        if model in base.index:
            b = base.loc[model]
            colour = handle.lines[0].get_color()
            ax.axhline(b["mean"], color=colour, linestyle="--", linewidth=1)
            ax.axhspan(b["mean"] - np.nan_to_num(b["std"]), b["mean"] + np.nan_to_num(b["std"]),
                       color=colour, alpha=0.1)
    ax.set(xlabel="N_MC (test-time passes)", ylabel=f"test {ylabel}",
           title=f"{dataset}: dashed = {BASELINE} mean, band = +- std")
    ax.legend(fontsize="small")
    return save_figure(fig, path)
