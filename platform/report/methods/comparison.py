"""The comparison of many methods over many datasets, as the time-series classification field reads one (Demšar,
JMLR 7, 2006; Benavoli et al., JMLR 17, 2016 and 18, 2017): per set, each method's mean (std) and paired tests
against the reference methods; across sets, average ranks, the Friedman test, Holm-adjusted Wilcoxon tests for the
critical-difference diagram, and Bayesian signed-rank tests of one method against each other one.

A method is a tuned cell (no fixed-parameter variant) of one model: its validation-selected point, over the seeds.
Scores are sign-adjusted so that higher is better (``-NLL``), per dataset on that dataset's primary metric.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from ndebench.platform.common.labels import cell_name
from ndebench.platform.report.statistics import bayes, significance, stats
from ndebench.platform.report.statistics.rows import row_names
from ndebench.regularizers.none import BASELINE
from scipy.stats import friedmanchisquare

# The methods every other method is tested against within a set: the unregularized model and Continuum Dropout.
REFERENCES = (BASELINE, "continuum_dropout")
# The method the Bayesian comparison sets against each other one, and its region of practical equivalence: one
# percentage point of accuracy (or of AUROC), in the units of the primary metric.
FOCUS = "continuum_dropout"
ROPE = 0.01
MIN_METHODS = 3
MIN_DATASETS = 2


@dataclass
class ModelComparison:
    """One model's comparison. ``cells``: one row per (dataset, method) with ``metric, n, mean, std, score`` (the
    sign-adjusted mean), ``rank`` (1 = best within the set, ties averaged) and ``best``; ``tests``: one row per
    (dataset, method, reference) with :func:`~ndebench.platform.report.statistics.stats.compare_to_baseline`'s
    ``difference, t, p, df, direction`` and ``p_holm`` over the family of that set and reference (every other
    method of the set against the reference); ``ranks``: the average rank of each method over the sets where every
    method has a score, best first; ``friedman``: ``chi2, p, n_datasets, n_methods`` (``scipy.stats.friedmanchisquare``
    on those sets); ``pairs``: the Holm-adjusted Wilcoxon tests of every pair
    (:func:`~ndebench.platform.report.statistics.stats.pairwise_wilcoxon`); ``bayes``: :data:`FOCUS` against each
    other method (:func:`~ndebench.platform.report.statistics.bayes.signed_rank`, rope :data:`ROPE`)."""

    model: str
    methods: list[str]
    datasets: list[str]
    cells: pd.DataFrame
    tests: pd.DataFrame
    ranks: pd.Series
    friedman: dict[str, float]
    pairs: pd.DataFrame
    bayes: dict[str, bayes.BayesResult] = field(default_factory=dict)


def tuned_cells(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of tuned cells only (``variant`` empty where the frame has it), with a ``method`` column: the cell's
    ``label`` where the frame has one, else its row (:func:`~ndebench.platform.report.statistics.rows.row_names`)."""
    if "variant" in runs.columns:
        runs = runs[runs["variant"].fillna("") == ""]
    names = runs["label"] if "label" in runs.columns else [None] * len(runs)
    return runs.assign(method=[cell_name(r, n if isinstance(n, str) else None)
                               for r, n in zip(row_names(runs), names, strict=True)])


def compare_models(runs: pd.DataFrame, primary: dict[str, str], test: str, alpha: float) -> list[ModelComparison]:
    """:class:`ModelComparison` of every model of ``runs`` (a study frame; ``primary``: dataset -> metric column)
    with at least :data:`MIN_METHODS` methods and :data:`MIN_DATASETS` datasets; tests by ``test`` (``student``,
    ``welch``, ``paired``), Holm-adjusted at ``alpha``."""
    runs = tuned_cells(runs)
    out = []
    for model, part in runs.groupby("model", sort=True):
        methods = _ordered(set(part["method"]))
        datasets = sorted(set(part["dataset"]))
        if len(methods) >= MIN_METHODS and len(datasets) >= MIN_DATASETS:
            out.append(_compare(str(model), part, methods, datasets, primary, test, alpha))
    return out


def _ordered(methods: set[str]) -> list[str]:
    """``none`` first, Continuum Dropout last, the others alphabetically between (the paper's column order)."""
    middle = sorted(methods - set(REFERENCES))
    return [m for m in (BASELINE,) if m in methods] + middle + [m for m in (FOCUS,) if m in methods]


def _compare(model: str, runs: pd.DataFrame, methods: list[str], datasets: list[str], primary: dict[str, str],
             test: str, alpha: float) -> ModelComparison:
    cells, tests = [], []
    for dataset in datasets:
        metric = primary[dataset]
        here = runs[runs["dataset"] == dataset]
        summary = stats.summarize_cells(here, metric, ["model", "dataset", "method"])
        sign = 1.0 if stats.higher_is_better(metric) else -1.0
        summary = summary.assign(score=summary["mean"] * sign)
        summary["rank"] = summary["score"].rank(ascending=False)
        summary["best"] = summary["score"] == summary["score"].max()
        cells.append(summary)
        for reference in REFERENCES:
            if reference not in set(here["method"]):
                continue
            found = stats.compare_to_baseline(here, metric, test=test, alpha=alpha, baseline=reference, name="method")
            found["p_holm"] = significance.adjust(found["p"].to_numpy(float), "holm", alpha)
            tests.append(found.assign(family=len(found)))
    cell_frame = pd.concat(cells, ignore_index=True)
    test_frame = pd.concat(tests, ignore_index=True) if tests else pd.DataFrame()
    scores = cell_frame.pivot(index="method", columns="dataset", values="score").reindex(methods).dropna(axis=1)
    ranks = scores.rank(ascending=False).mean(axis=1).sort_values() if scores.shape[1] else pd.Series(dtype=float)
    friedman = {"chi2": np.nan, "p": np.nan, "n_datasets": scores.shape[1], "n_methods": len(methods)}
    if scores.shape[1] >= 2:
        result = friedmanchisquare(*scores.to_numpy(float))
        friedman |= {"chi2": float(result.statistic), "p": float(result.pvalue)}
    pairs = stats.pairwise_wilcoxon(runs, primary, model, alpha, name="method")
    focus = {}
    if FOCUS in scores.index:
        for other in (m for m in methods if m != FOCUS):
            both = scores.loc[[FOCUS, other]]
            focus[other] = bayes.signed_rank(both.loc[FOCUS].to_numpy(), both.loc[other].to_numpy(), ROPE)
    return ModelComparison(model, methods, datasets, cell_frame, test_frame, ranks, friedman, pairs, focus)
