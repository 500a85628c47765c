"""Each regularizer against ``none`` of its own architecture, where variant cells vary ``model.*`` keys.

``variants: {none: {model.hidden_size: [16, 64]}, continuum_dropout: {p: [0.1], model.hidden_size: [16, 64]}}``
gives the cells ``none[model.hidden_size=16]`` and ``continuum_dropout[p=0.1,model.hidden_size=16]``. The main
table compares every cell with the tuned ``none``, whose architecture is the base stage's choice, so a difference
there mixes the architecture's effect with the regularizer's. Here a cell is compared with the ``none`` variant of
the same ``model.*`` values, within its (model, dataset), on the dataset's primary metric: difference = cell mean
- ``none[arch]`` mean, its 95% interval, p of the report's test, Hedges' g
(:func:`~ndebench.platform.report.statistics.stats.compare_to_baseline`), and the p-values Holm-adjusted over all
of these comparisons together (``p_holm_all``).
"""
from __future__ import annotations

import math

import pandas as pd
from ndebench.platform.report.render.format import fmt, fmt_p, interval
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import significance, stats
from ndebench.platform.report.statistics.rows import row_names
from ndebench.regularizers.none import BASELINE

SKIPPED = ("no none variant with model.* values (e.g. `variants: {none: {model.hidden_size: [16, 64]}}` beside the "
           "same values for a regularizer)")


def architecture(fixed: object) -> str:
    """The ``model.*`` values a cell fixes (its ``fixed`` column), comma-joined in its label's order (``""`` when
    it fixes none)."""
    items = fixed.items() if isinstance(fixed, dict) else ()
    return ",".join(f"{k}={v}" for k, v in items if k.startswith("model."))


def matched_comparisons(runs: pd.DataFrame, primary: dict[str, str], test: str, alpha: float) -> pd.DataFrame:
    """Every cell with ``model.*`` settings against ``none[<the same settings>]`` of its (model, dataset); one row
    per comparison with :func:`~ndebench.platform.report.statistics.stats.compare_to_baseline`'s columns,
    ``architecture`` (the settings) and ``p_holm_all`` (Holm over every row). Empty without such a pair. A cell's
    label is its row (:func:`~ndebench.platform.report.statistics.rows.row_names`); its settings, its ``fixed``
    column."""
    if "fixed" not in runs:
        return pd.DataFrame()
    labelled = runs.assign(architecture=runs["fixed"].map(architecture),
                           pure=runs["fixed"].map(lambda f: isinstance(f, dict) and all(k.startswith("model.")
                                                                                        for k in f)))
    frames = []
    for (_, dataset, setting), part in labelled[labelled["architecture"] != ""].groupby(
            ["model", "dataset", "architecture"], sort=True):
        names = row_names(part)
        baselines = set(names[(part["regularizer"] == BASELINE) & part["pure"]])
        if len(baselines) == 1 and names.nunique() > 1:
            tests = stats.compare_to_baseline(part.drop(columns=["architecture", "pure"]), primary[dataset],
                                              test=test, alpha=alpha, baseline=baselines.pop())
            frames.append(tests.assign(architecture=setting))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out["p_holm_all"] = significance.adjust(out["p"].to_numpy(float), "holm", alpha)
    return out


def matched_section(comparisons: pd.DataFrame, alpha: float) -> Section | None:
    """The comparisons as a report section (``None`` without any)."""
    if comparisons.empty:
        return None
    rows = [[Cell(r.model), Cell(r.dataset), Cell(r.architecture), Cell(r.regularizer), Cell(fmt(r.mean_baseline)),
             Cell(fmt(r.mean)), Cell(fmt(r.difference, sign=True)), Cell(interval(r.diff_ci_low, r.diff_ci_high)),
             Cell(fmt_p(r.p)), Cell(fmt_p(r.p_holm_all)),
             Cell("–" if not math.isfinite(r.hedges_g) else f"{r.hedges_g:+.2f}")]
            for r in comparisons.itertuples(index=False)]
    better = comparisons[(comparisons["p"] < alpha) & (comparisons["direction"] == "better")]
    worse = comparisons[(comparisons["p"] < alpha) & (comparisons["direction"] == "worse")]
    held = comparisons[comparisons["p_holm_all"] < alpha]
    caption = (f"Each cell against {BASELINE} of the same model.* settings (difference = cell - {BASELINE}[settings],"
               f" test: {comparisons['test'].iloc[0]}, 95% interval of the difference); unadjusted p below {alpha:g}:"
               f" {len(better)} of {len(comparisons)} better, {len(worse)} of {len(comparisons)} worse; "
               f"{len(held)} of {len(comparisons)} below {alpha:g} after Holm over all {len(comparisons)}.")
    return Section("Against none of the same architecture",
                   ["model", "dataset", "architecture", "regularizer", BASELINE, "mean", "difference", "95% CI",
                    "p", "p (Holm, all)", "Hedges' g"], rows, caption)
