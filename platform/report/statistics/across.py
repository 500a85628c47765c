"""A regularizer's improvement over ``none`` summed up over many datasets (the rows of the paper's Tables 9-11)
and the channel count that splits the datasets into univariate and multivariate ones.

With per-dataset means ``r_d``, ``b_d`` (sign-adjusted so positive is better) the improvement is the mean
over datasets of ``d_d = r_d - b_d`` with ``scipy.stats.sem`` and the % change the mean of
``100 d_d / |b_d|`` with its SEM, both from :func:`~ndebench.platform.report.statistics.stats.compare_across_datasets`;
beside them each side's mean over datasets and the mean of its per-dataset stds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from ndebench.platform.report.statistics import stats
from ndebench.regularizers.none import BASELINE


def channel_count(dataset: str) -> int | None:
    """Input channels of a UEA/UCR archive set (``uea/BasicMotions`` -> 6) where the archive's table knows
    them, else None (the dataset then enters only the all-datasets summary)."""
    from ndebench.datasets.uea import expected_shape

    shape = expected_shape(dataset.split("/")[-1])
    return None if shape is None else shape[2]


def summary_rows(runs: pd.DataFrame, metrics: dict[str, str], alpha: float = 0.05) -> pd.DataFrame:
    """One row per (model, regularizer) against ``none``: ``n_datasets``, ``baseline_mean``,
    ``baseline_std`` (mean of per-dataset stds), ``mean``, ``std`` (the same for the regularizer),
    ``mean_improvement``, ``se``, ``pct_change``, ``pct_se``, ``wins``, Wilcoxon ``p`` and ``p_holm``."""
    across = stats.compare_across_datasets(runs, metrics, alpha=alpha)
    if across.empty:
        return across
    # One summary per metric (a cell's statistics do not depend on the other datasets), read as a dict.
    datasets_of: dict[str, list[str]] = {}
    for dataset, metric in metrics.items():
        datasets_of.setdefault(metric, []).append(dataset)
    cells: dict[tuple[str, str, str], tuple[float, float]] = {}
    for metric, datasets in datasets_of.items():
        summary = stats.summarize_cells(runs[runs["dataset"].isin(datasets)], metric)
        keys = zip(*(summary[c].tolist() for c in stats.CELL), strict=True)
        cells.update(zip(keys, zip(summary["mean"].tolist(), summary["std"].tolist(), strict=True), strict=True))
    extra = []
    for row in across.itertuples(index=False):
        base = [cells[(row.model, d, BASELINE)] for d in row.datasets]
        reg = [cells[(row.model, d, row.regularizer)] for d in row.datasets]
        extra.append({"baseline_mean": _mean([c[0] for c in base]), "baseline_std": _mean([c[1] for c in base]),
                      "mean": _mean([c[0] for c in reg]), "std": _mean([c[1] for c in reg])})
    return pd.concat([across.reset_index(drop=True), pd.DataFrame(extra)], axis=1)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")
