"""Extended summary over many datasets (the paper's Tables 9-11): per model and regularizer, the baseline's
and the regularizer's mean over datasets with the mean of their per-dataset stds in brackets, the
improvement +- SEM and the % change +- SEM, for all datasets and split into univariate and multivariate sets.

With per-dataset means ``r_d``, ``b_d`` (sign-adjusted so positive is better) the improvement is the mean
over datasets of ``d_d = r_d - b_d`` with ``scipy.stats.sem`` and the % change the mean of
``100 d_d / |b_d|`` with its SEM, both from :func:`~ndebench.platform.report.statistics.stats.compare_across_datasets`.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import stats
from ndebench.regularizers.none import BASELINE

SPLITS = (("all", "datasets"), ("univariate", "univariate datasets (1 channel)"),
          ("multivariate", "multivariate datasets (more than 1 channel)"))


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


def summary_sections(runs: pd.DataFrame, primary: dict[str, str], alpha: float = 0.05,
                     channels: dict[str, int | None] | None = None) -> list[Section]:
    """The extended summary for all datasets, then for the univariate and the multivariate ones (each only
    where it has at least one dataset and the split differs from all datasets)."""
    channels = channels or {d: channel_count(d) for d in primary}
    groups = {"all": list(primary),
              "univariate": [d for d in primary if channels.get(d) == 1],
              "multivariate": [d for d in primary if (channels.get(d) or 0) > 1]}
    sections = []
    for key, words in SPLITS:
        datasets = groups[key]
        if not datasets or (key != "all" and len(datasets) == len(primary)):
            continue
        rows = summary_rows(runs[runs["dataset"].isin(datasets)], {d: primary[d] for d in datasets}, alpha)
        if rows.empty:
            continue
        table = [[Cell(r.model), Cell(r.regularizer), Cell(str(r.n_datasets)),
                  Cell(_spread(f"{r.baseline_mean:.3f}", r.baseline_std, " ({:.3f})")),
                  Cell(_spread(f"{r.mean:.3f}", r.std, " ({:.3f})")),
                  Cell(_spread(f"{r.mean_improvement:+.3f}", r.se, " ± {:.3f}")),
                  Cell(_spread(f"{r.pct_change:+.2f}", r.pct_se, " ± {:.2f}")),
                  Cell(f"{r.wins}/{r.n_datasets}")] for r in rows.itertuples(index=False)]
        caption = (f"Averaged over {len(datasets)} {words} on each dataset's primary metric; values in brackets are "
                   f"the mean of the per-dataset standard deviations; improvement and % change (sign-adjusted, "
                   f"positive is better) are the mean +- standard error of the mean over datasets.")
        sections.append(Section(f"Extended summary: {key} ({len(datasets)} datasets)",
                                ["model", "regularizer", "datasets", BASELINE,
                                 "regularizer mean", "improvement", "% change", "wins"],
                                table, caption, align="llrrrrrr",
                                short_caption=f"Summary over {len(datasets)} " + ("" if key == "all" else f"{key} ")
                                              + "set(s): improvement "
                                              r"$\pm$ SEM vs.\ None"))
    return sections


def _spread(value: str, spread: float, form: str) -> str:
    """``value`` with its spread in ``form``; without it where it is undefined (one dataset, one seed)."""
    return value + (form.format(spread) if math.isfinite(spread) else "")
