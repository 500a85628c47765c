"""The Monte-Carlo control of the SDE rows: which comparison isolates a regularizer from the averaging of passes.

On an SDE model, Continuum Dropout predicts ``head(mean_j z_j(T))`` over N = 5 passes, and that mean also
averages the Brownian noise, while ``none`` predicts from one random pass. So ``continuum_dropout - none`` is
dropout plus ensembling. The control cell ``none[n_mc=N]`` (``variants: {none: {n_mc: [N]}}``) averages N passes
of the unregularized model: ``regularizer - none[n_mc=N]`` isolates the regularizer, and ``none[n_mc=N] - none``
(a row of the main table) is the ensembling alone.
"""
from __future__ import annotations

import math

import pandas as pd
from ndebench.platform.report.render.format import fmt, fmt_p, interval
from ndebench.platform.report.render.sections import Cell, Section, to_markdown
from ndebench.platform.report.statistics import stats
from ndebench.platform.report.statistics.rows import row_names
from ndebench.regularizers.none import BASELINE

SKIPPED = ("no none[n_mc=N] control cell: on an SDE model a regularizer predicting from N averaged passes is compared "
           "with one random pass of none, so its difference mixes the regularizer with ensembling; add "
           "`variants: {none: {n_mc: [5]}}` to the config")


def passes(runs: pd.DataFrame) -> pd.Series:
    """Per run, the number of passes N of the control cell ``none[n_mc=N]`` it belongs to (a variant of ``none``
    fixing ``n_mc`` alone: its ``regularizer`` and ``fixed`` columns), NaN for a run of any other cell."""
    fixed = runs["fixed"] if "fixed" in runs else pd.Series([{}] * len(runs), index=runs.index)
    return pd.Series([float(f["n_mc"]) if r == BASELINE and isinstance(f, dict) and f.keys() == {"n_mc"} else math.nan
                      for r, f in zip(runs["regularizer"], fixed, strict=True)], index=runs.index, name="passes")


def controls(runs: pd.DataFrame) -> dict[tuple[str, str], tuple[str, int]]:
    """The control cell's label and its N per (model, dataset) that has one (the first by label when several); a
    run's label is its row (:func:`~ndebench.platform.report.statistics.rows.row_names`)."""
    names, n = row_names(runs), passes(runs)
    found = pd.DataFrame({"model": runs["model"], "dataset": runs["dataset"], "label": names, "n": n}).dropna()
    return {key: min(zip(group["label"], group["n"].astype(int), strict=True))
            for key, group in found.groupby(["model", "dataset"], sort=True)}


def control_comparisons(runs: pd.DataFrame, primary: dict[str, str], test: str, alpha: float) -> pd.DataFrame:
    """Every regularizer other than ``none`` and its controls against the control cell of its (model, dataset), on
    the dataset's ``primary`` metric with the report's ``test``
    (:func:`~ndebench.platform.report.statistics.stats.compare_to_baseline` with ``baseline`` the control's label:
    difference
    = regularizer mean - control mean, its 95% interval, p, Hedges' g); column ``baseline`` names the control and
    ``passes`` its N."""
    frames = []
    others = set(row_names(runs)[passes(runs).notna()]) | {BASELINE}
    for (model, dataset), (label, n) in controls(runs).items():
        part = runs[(runs["model"] == model) & (runs["dataset"] == dataset)]
        tests = stats.compare_to_baseline(part, primary[dataset], test=test, alpha=alpha, baseline=label)
        frames.append(tests[~tests["regularizer"].isin(others)].assign(passes=n))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def sentence(comparisons: pd.DataFrame) -> str:
    """Which comparison isolates dropout from ensembling, naming the controls the study has."""
    labels = sorted(set(comparisons["baseline"]))
    n = ", ".join(str(n) for _, n in sorted(set(zip(comparisons["baseline"], comparisons["passes"], strict=True))))
    models = ", ".join(sorted(set(comparisons["model"])))
    return (f"On {models}, {' and '.join(labels)} averages {n} passes of the unregularized model, as Continuum "
            f"Dropout's prediction does (which on an SDE also averages the Brownian noise): a regularizer against "
            f"{labels[0]} isolates the regularizer from ensembling; against {BASELINE} (one random pass) it is both "
            f"together, and {labels[0]} against {BASELINE} (main table) is the ensembling alone.")


def controls_json(comparisons: pd.DataFrame) -> dict[str, object]:
    """``summary.json``'s ``mc_control``: the sentence and the comparisons, or the reason there are none."""
    if comparisons.empty:
        return {"mc_control": None, "mc_control_skipped": SKIPPED}
    return {"mc_control": {"sentence": sentence(comparisons),
                           "comparisons": comparisons.drop(columns="passes").to_dict(orient="records")}}


def control_section(comparisons: pd.DataFrame) -> Section | None:
    """The comparisons with the control as a report section, the sentence its caption (``None`` without any);
    ``table.md`` and ``report.html`` render it."""
    if comparisons.empty:
        return None
    rows = [[Cell(r.model), Cell(r.dataset), Cell(r.regularizer), Cell(r.baseline), Cell(fmt(r.difference, sign=True)),
             Cell(interval(r.diff_ci_low, r.diff_ci_high)), Cell(fmt_p(r.p)),
             Cell("–" if not math.isfinite(r.hedges_g) else f"{r.hedges_g:+.2f}")]
            for r in comparisons.itertuples(index=False)]
    return Section("Dropout vs ensembling: against the Monte-Carlo control",
                   ["model", "dataset", "regularizer", "control", "difference", "95% CI", "p", "Hedges' g"],
                   rows, sentence(comparisons) + f" Test: {comparisons['test'].iloc[0]}.")


def controls_markdown(comparisons: pd.DataFrame) -> str:
    """:func:`control_section` as a ``table.md`` section ("" without any comparison)."""
    section = control_section(comparisons)
    return "" if section is None else "\n" + to_markdown(section)
