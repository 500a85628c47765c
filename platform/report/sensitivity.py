"""Sensitivity of a regularizer to its own parameters, from its fixed-parameter variant cells.

For Continuum Dropout the variants span a (p, m) grid: one p x m table per (model, dataset) (the paper's
Table 12) and a line plot of the metric against p, one line per m, over the baseline's mean +- std band
(Figs. 6-9). A regularizer with one varied parameter (jump diffusion's ``rate``) gets one table per dataset
with the parameter's values as rows and the models as columns (Tables 16-17) and a line plot per dataset.
The parameters are every numeric hyperparameter the regularizers declare, a plugin's included
(:func:`~ndebench.platform.record.runs.regularizer_params`).

A cell is the mean (sample std) over the ``ok`` seeds of one variant; it is flagged (the paper's red) when it
is worse than the baseline ``none`` of the same (model, dataset) by more than one baseline std:
``mean < mean_none - std_none`` when higher is better, ``mean > mean_none + std_none`` otherwise. The best
mean of a table (column, for the per-rate tables) is bold.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from ndebench.platform.record.runs import regularizer_params
from ndebench.platform.report.render.sections import Cell, Section, mean_std, save_figure
from ndebench.platform.report.render.tables import LABELS
from ndebench.platform.report.statistics import stats
from ndebench.regularizers.none import BASELINE


def variant_cells(runs: pd.DataFrame, regularizer: str, metric: str) -> pd.DataFrame:
    """Per (model, dataset, variant label) of ``regularizer``: ``n, mean, std`` (from
    :func:`~ndebench.platform.report.statistics.stats.summarize_cells`, ok runs only) and the variant's parameters
    (the columns of :func:`~ndebench.platform.record.runs.regularizer_params` that ``runs`` has)."""
    declared = [q for q in regularizer_params() if q in runs]
    part = runs[(runs["regularizer"] == regularizer) & (runs["variant"].fillna("") != "")]
    if part.empty:
        return pd.DataFrame(columns=["model", "dataset", "label", "n", "mean", "std", *declared])
    cells = stats.summarize_cells(part, metric, ["model", "dataset", "variant"]).rename(columns={"variant": "label"})
    params = part.groupby("variant")[declared].first()
    return cells.join(params, on="label")


def baseline_cells(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``n, mean, std`` of the baseline ``none`` per (model, dataset), indexed by (model, dataset)."""
    part = runs[(runs["regularizer"] == BASELINE) & (runs["variant"].fillna("") == "")]
    if part.empty:
        return pd.DataFrame(columns=["n", "mean", "std"])
    return stats.summarize_cells(part, metric).set_index(["model", "dataset"])[["n", "mean", "std"]]


def varied_params(cells: pd.DataFrame) -> list[str]:
    """The declared parameters (:func:`~ndebench.platform.record.runs.regularizer_params`: ``p, m, rate``, ...,
    a plugin's) that take more than one value across the variant cells."""
    return [q for q in regularizer_params() if q in cells and cells[q].dropna().nunique() > 1]


def worse_than_baseline(mean: float, base_mean: float, base_std: float, metric: str) -> bool:
    """The paper's red cell: worse than the baseline's mean by more than one baseline std."""
    if not (np.isfinite(mean) and np.isfinite(base_mean)):
        return False
    spread = base_std if np.isfinite(base_std) else 0.0
    if stats.higher_is_better(metric):
        return bool(mean < base_mean - spread)
    return bool(mean > base_mean + spread)


def _slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", str(p)) for p in parts)


def _value(x: float) -> str:
    return f"{x:g}"


def _baseline_text(base: pd.DataFrame, model: str, dataset: str) -> str:
    if (model, dataset) not in base.index:
        return f"no {BASELINE} runs, so no cell is flagged"
    row = base.loc[(model, dataset)]
    return f"{BASELINE}: {mean_std(row['mean'], row['std'], int(row['n']))} (n = {int(row['n'])})"


def _cell(row: pd.Series, base: pd.DataFrame, model: str, dataset: str, metric: str) -> Cell:
    b = base.loc[(model, dataset)] if (model, dataset) in base.index else None
    flag = b is not None and worse_than_baseline(row["mean"], b["mean"], b["std"], metric)
    return Cell(mean_std(row["mean"], row["std"], int(row["n"])), flag=flag)


def _bold_best(cells: list[Cell], means: list[float], metric: str) -> None:
    finite = [round(m, 3) for m in means if np.isfinite(m)]
    if not finite:
        return
    best = (max if stats.higher_is_better(metric) else min)(finite)
    for cell, mean in zip(cells, means, strict=True):
        cell.bold = bool(np.isfinite(mean) and round(mean, 3) == best)


def grid_section(cells: pd.DataFrame, base: pd.DataFrame, model: str, dataset: str, metric: str,
                 regularizer: str, rows: str, cols: str, directory: Path) -> Section:
    """The ``rows`` x ``cols`` table of one (model, dataset) and its line plot (``metric`` against ``rows``,
    one line per value of ``cols``, with the baseline's mean +- std band)."""
    part = cells[(cells["model"] == model) & (cells["dataset"] == dataset)]
    row_values, col_values = sorted(part[rows].dropna().unique()), sorted(part[cols].dropna().unique())
    by_point = {(r[rows], r[cols]): r for _, r in part.iterrows()}
    table, flat, means = [], [], []
    for rv in row_values:
        line = [Cell(_value(rv))]
        for cv in col_values:
            row = by_point.get((rv, cv))
            cell = Cell("–") if row is None else _cell(row, base, model, dataset, metric)
            line.append(cell)
            flat.append(cell)
            means.append(math.nan if row is None else float(row["mean"]))
        table.append(line)
    _bold_best(flat, means, metric)
    label = LABELS.get(metric, metric)
    figure = _line_plot({f"{cols}={_value(cv)}": part[part[cols] == cv].sort_values(rows) for cv in col_values},
                        rows, base, [(model, dataset, None)], f"{model} on {dataset}: {regularizer}", label,
                        directory / f"sensitivity_{_slug(regularizer, model, dataset)}.png")
    caption = (f"Test {label} of {model} on {dataset} with {regularizer} at fixed ({rows}, {cols}): mean (sample "
               f"std) over the ok seeds of each variant cell; {_baseline_text(base, model, dataset)}; bold: best.")
    return Section(f"{regularizer}: {rows} x {cols} on {model} / {dataset}", [f"{rows} \\ {cols}"] +
                   [_value(v) for v in col_values], table, caption, figure)


def rate_section(cells: pd.DataFrame, base: pd.DataFrame, dataset: str, metric: str, regularizer: str,
                 param: str, directory: Path) -> Section:
    """Rows: the values of ``param`` (plus the baseline row); columns: models; one dataset (Tables 16-17)."""
    part = cells[cells["dataset"] == dataset]
    models = sorted(part["model"].unique())
    values = sorted(part[param].dropna().unique())
    columns: list[list[Cell]] = []
    for model in models:
        rows = part[part["model"] == model].set_index(param)
        column = [_cell(rows.loc[v], base, model, dataset, metric) if v in rows.index else Cell("–") for v in values]
        _bold_best(column, [float(rows.loc[v, "mean"]) if v in rows.index else math.nan for v in values], metric)
        columns.append(column)
    baseline_row = [Cell(f"{BASELINE}")] + [
        Cell(mean_std(base.loc[(m, dataset), "mean"], base.loc[(m, dataset), "std"], int(base.loc[(m, dataset), "n"])))
        if (m, dataset) in base.index else Cell("–") for m in models]
    table = [baseline_row] + [[Cell(_value(v))] + [col[i] for col in columns] for i, v in enumerate(values)]
    label = LABELS.get(metric, metric)
    figure = _line_plot({m: part[part["model"] == m].sort_values(param) for m in models}, param, base,
                        [(m, dataset, m) for m in models], f"{regularizer} on {dataset}", label,
                        directory / f"sensitivity_{_slug(regularizer, dataset)}.png")
    caption = (f"Test {label} on {dataset} with {regularizer} at each fixed {param}: mean (sample std) over the "
               f"ok seeds of each variant cell; first row: the baseline {BASELINE}; bold: best per model.")
    return Section(f"{regularizer}: {param} on {dataset}", [param] + models, table, caption, figure)


def _line_plot(lines: dict[str, pd.DataFrame], x: str, base: pd.DataFrame,
               bands: list[tuple[str, str, str | None]], title: str, ylabel: str, path: Path) -> list[Path]:
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot()
    colours = {}
    for name, frame in lines.items():
        handle = ax.errorbar(frame[x], frame["mean"], yerr=frame["std"].fillna(0.0), marker="o", capsize=3,
                             label=name)
        colours[name] = handle.lines[0].get_color()
    for model, dataset, line in bands:
        if (model, dataset) not in base.index:
            continue
        b = base.loc[(model, dataset)]
        colour = colours.get(line, "black") if line else "black"
        spread = b["std"] if np.isfinite(b["std"]) else 0.0
        ax.axhline(b["mean"], color=colour, linestyle="--", linewidth=1,
                   label=f"{BASELINE}" + (f" ({line})" if line else ""))
        ax.axhspan(b["mean"] - spread, b["mean"] + spread, color=colour, alpha=0.12)
    ax.set(xlabel=x, ylabel=f"test {ylabel}", title=title)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def sensitivity_sections(runs: pd.DataFrame, primary: dict[str, str], directory: Path) -> list[Section]:
    """Every sensitivity table and plot of a study: for each regularizer with variant cells, a grid per
    (model, dataset) when two of its declared parameters vary, a per-dataset table when one does; on each dataset's
    ``primary`` metric."""
    sections = []
    for regularizer in sorted(set(runs.loc[runs["variant"].fillna("") != "", "regularizer"])):
        for dataset in sorted(primary):
            metric = primary[dataset]
            cells = variant_cells(runs[runs["dataset"] == dataset], regularizer, metric)
            varied = varied_params(cells)
            base = baseline_cells(runs[runs["dataset"] == dataset], metric)
            if len(varied) == 2:
                sections += [grid_section(cells, base, model, dataset, metric, regularizer, *varied, directory)
                             for model in sorted(cells["model"].unique())]
            elif len(varied) == 1:
                sections.append(rate_section(cells, base, dataset, metric, regularizer, varied[0], directory))
    return sections
