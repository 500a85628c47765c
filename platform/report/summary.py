"""Extended summary over many datasets (the paper's Tables 9-11): per model and regularizer, the baseline's
and the regularizer's mean over datasets with the mean of their per-dataset stds in brackets, the
improvement +- SEM and the % change +- SEM, for all datasets and split into univariate and multivariate sets.

With per-dataset means ``r_d``, ``b_d`` (sign-adjusted so positive is better) the improvement is the mean
over datasets of ``d_d = r_d - b_d`` with ``scipy.stats.sem`` and the % change the mean of
``100 d_d / |b_d|`` with its SEM, both from :func:`~ndebench.platform.report.statistics.stats.compare_across_datasets`.
"""
from __future__ import annotations

import math

import pandas as pd
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics.across import channel_count, summary_rows
from ndebench.regularizers.none import BASELINE

SPLITS = (("all", "datasets"), ("univariate", "univariate datasets (1 channel)"),
          ("multivariate", "multivariate datasets (more than 1 channel)"))


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
