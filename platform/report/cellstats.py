"""The statistics of each cell's evaluate runs that the engine records on the cell's MLflow run.

The same code as the report's tables (:func:`~ndebench.platform.report.stats.summarize_cells`,
:func:`~ndebench.platform.report.stats.compare_to_baseline`), so that a number is computed once; the entry
layer hands :func:`cell_statistics` to the sweep, which never imports the report wing.
"""
from __future__ import annotations

import pandas as pd
from ndebench.platform.record.schema import COUNTED_STATUSES
from ndebench.platform.report.report import primary_metrics
from ndebench.platform.report.stats import compare_to_baseline, summarize_cells
from ndebench.regularizers.none import BASELINE


def cell_statistics(runs: pd.DataFrame, cells: list[tuple[str, str, str]],
                    test: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """Per ``(model, dataset, regularizer)`` cell with an ``ok`` run: ``n`` (its ok runs), ``mean_<m>`` and
    ``std_<m>`` of every numeric ``test_*`` column, and ``p_value_vs_none``, the two-sided ``test`` of the
    dataset's primary metric against the baseline. ``runs`` has one row per evaluate run with ``regularizer``
    naming the cell (a variant's label for variant cells); cells without an ok run are left out."""
    metrics = [c for c in runs.columns if c.startswith("test_") and pd.api.types.is_numeric_dtype(runs[c])]
    primary = primary_metrics(runs) if len(runs) else {}
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for model, dataset, name in cells:
        mine = runs[(runs.model == model) & (runs.dataset == dataset) & (runs.regularizer == name)
                    & runs.status.isin(COUNTED_STATUSES)]
        if not (mine["status"] == "ok").any():
            continue
        values: dict[str, float] = {"n": float((mine["status"] == "ok").sum())}
        for metric in metrics:
            row = summarize_cells(mine, metric).iloc[0]
            if row["n"]:
                values[f"mean_{metric}"], values[f"std_{metric}"] = row["mean"], row["std"]
        metric = primary.get(dataset)
        if name != BASELINE and metric:
            pair = runs[(runs.model == model) & (runs.dataset == dataset) & runs.regularizer.isin([name, BASELINE])]
            tests = compare_to_baseline(pair, metric, test=test)
            if len(tests):
                values["p_value_vs_none"] = float(tests["p"].iloc[0])
        out[(model, dataset, name)] = values
    return out
