"""The statistics of each cell's evaluate runs that the engine records on the cell's MLflow run.

The same code as the report's tables (:func:`~ndebench.platform.report.statistics.stats.summarize_cells`,
:func:`~ndebench.platform.report.statistics.stats.compare_to_baseline`), so that a number is computed once; the entry
layer hands :func:`cell_statistics` to the sweep, which never imports the report wing.
"""
from __future__ import annotations

import pandas as pd
from ndebench.platform.record.schema import COUNTED_STATUSES
from ndebench.platform.report.report import primary_metrics
from ndebench.platform.report.statistics.stats import compare_to_baseline, summarize_cells
from ndebench.regularizers.none import BASELINE

# Metric names on the cell run for the primary metric's comparison with the baseline (the report's test).
COMPARISON = {"difference": "diff_vs_none", "diff_ci_low": "diff_ci_low", "diff_ci_high": "diff_ci_high",
              "p": "p_value_vs_none", "hedges_g": "hedges_g", "hedges_g_ci_low": "hedges_g_ci_low",
              "hedges_g_ci_high": "hedges_g_ci_high"}


def cell_statistics(runs: pd.DataFrame, cells: list[tuple[str, str, str]],
                    test: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """Per ``(model, dataset, label)`` cell with an ``ok`` run, in this order: ``mean_<m>`` and ``std_<m>``
    of the dataset's primary metric ``m``; against the baseline ``none`` on ``m`` under ``test`` (the report's
    :func:`~ndebench.platform.report.statistics.stats.compare_to_baseline`): ``diff_vs_none`` (cell mean minus
    ``none``'s
    mean), its 95% interval ``diff_ci_low``/``diff_ci_high``, the two-sided ``p_value_vs_none``, Hedges' g
    ``hedges_g`` with ``hedges_g_ci_low``/``hedges_g_ci_high``
    (:func:`~ndebench.platform.report.statistics.effects.effect_sizes`); then ``n`` (its ok runs) and ``mean_<m>``,
    ``std_<m>`` of every other numeric ``test_*`` column. The primary metric comes first: MLflow's compare page
    plots the first metric the runs share. ``runs`` has one row per evaluate run with ``label`` naming the cell (a
    variant's label for variant cells, else the regularizer); cells without an ok run are left out."""
    metrics = [c for c in runs.columns if c.startswith("test_") and pd.api.types.is_numeric_dtype(runs[c])]
    primary = primary_metrics(runs) if len(runs) else {}
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for model, dataset, name in cells:
        mine = runs[(runs.model == model) & (runs.dataset == dataset) & (runs.label == name)
                    & runs.status.isin(COUNTED_STATUSES)]
        if not (mine["status"] == "ok").any():
            continue
        metric = primary.get(dataset)
        n = float((mine["status"] == "ok").sum())
        values: dict[str, float] = {}
        for column in sorted(metrics, key=lambda c: c != metric):
            row = summarize_cells(mine, column).iloc[0]
            if row["n"]:
                values[f"mean_{column}"], values[f"std_{column}"] = row["mean"], row["std"]
            if column == metric:
                values |= _comparison(runs, model, dataset, name, metric, test) | {"n": n}
        values.setdefault("n", n)
        out[(model, dataset, name)] = values
    return out


def _comparison(runs: pd.DataFrame, model: str, dataset: str, name: str, metric: str,
                test: str) -> dict[str, float]:
    if name == BASELINE:
        return {}
    pair = runs[(runs.model == model) & (runs.dataset == dataset) & runs.label.isin([name, BASELINE])]
    tests = compare_to_baseline(pair, metric, test=test, name="label")
    if not len(tests):
        return {}
    row = tests.iloc[0]
    return {label: float(row[column]) for column, label in COMPARISON.items()}
