"""Statistics over evaluate-phase runs: per-cell mean (std), tests against the baseline, across-dataset summaries.

Everything works on a pandas frame with one row per run and columns ``model, dataset, regularizer, seed,
status`` (``ok`` | ``diverged`` | ``error``) plus metric columns such as ``test_accuracy``. A **cell** is
(model, dataset, row): the runs of one row of a table, named by the frame's
:data:`~ndebench.platform.report.statistics.rows.ROW` column, else by their regularizer
(:func:`~ndebench.platform.report.statistics.rows.row_names`). Only ``ok`` runs enter the statistics; diverged and
errored runs are counted in every per-cell output so that they stay visible. The tests are scipy's and
statsmodels', never re-implemented.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.common.choices import TESTS
from ndebench.platform.record.schema import COUNTED_STATUSES
from ndebench.platform.report.statistics.effects import COLUMNS as EFFECT_COLUMNS
from ndebench.platform.report.statistics.effects import effect_sizes_many, mean_interval
from ndebench.platform.report.statistics.rows import row_names
from ndebench.platform.report.statistics.significance import adjust
from ndebench.regularizers.none import BASELINE
from scipy import stats

# The key of a per-cell frame; as in the report's files, a row's name is its ``regularizer`` there.
CELL = ["model", "dataset", "regularizer"]
HIGHER_IS_BETTER = {"accuracy": True, "top5_accuracy": True, "auroc": True, "nll": False, "ece": False}
IDENTICAL = "identical"
TOO_FEW = "too few runs"
ZERO_VARIANCE = "zero variance"
# The correction of the across-dataset and pairwise Wilcoxon tests (the per-table one is the report's choice).
CORRECTION = "holm"


def higher_is_better(metric: str) -> bool:
    """Direction of a metric named ``accuracy`` or with a ``test_``/``val_`` prefix (``test_nll``...)."""
    base = metric.removeprefix("test_").removeprefix("val_")
    if base not in HIGHER_IS_BETTER:
        raise ValueError(f"unknown metric {metric!r}; valid metrics: {', '.join(HIGHER_IS_BETTER)} "
                         "(optionally prefixed with test_ or val_)")
    return HIGHER_IS_BETTER[base]


def check_test(test: str) -> str:
    """``test`` if it names one of :data:`TESTS`, else an error listing them."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; valid tests: {', '.join(TESTS)}")
    return test


def check_alpha(alpha: float, strong_alpha: float | None = None) -> float:
    """The ``**`` threshold (default ``alpha / 5``) after checking ``0 < strong_alpha <= alpha < 1``."""
    strong = alpha / 5 if strong_alpha is None else strong_alpha
    if not 0 < strong <= alpha < 1:
        raise ValueError(f"need 0 < strong_alpha <= alpha < 1; got alpha={alpha}, strong_alpha={strong}")
    return strong


def significance_marker(p: float, alpha: float = 0.05, strong_alpha: float | None = None) -> str:
    """``"**"`` when ``p < strong_alpha`` (default ``alpha / 5``: 0.01 for alpha 0.05), ``"*"`` when
    ``p < alpha``, else ``""`` (also for NaN)."""
    strong = check_alpha(alpha, strong_alpha)
    if not p < alpha:
        return ""
    return "**" if p < strong else "*"


def _ok_values(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    if metric not in runs.columns:
        raise ValueError(f"metric column {metric!r} is not in the runs; columns: {', '.join(map(str, runs.columns))}")
    ok = runs[runs["status"] == "ok"]
    return ok[np.isfinite(ok[metric].astype(float))]


def summarize_cells(runs: pd.DataFrame, metric: str, key: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per cell, a cell being the runs that share the ``key`` columns (default: model, dataset and row,
    :data:`CELL`; e.g. ``["model", "dataset", "label", "n_mc"]`` for re-evaluated runs): the key, ``n`` (ok runs with
    a finite metric), ``mean``, ``std`` (sample, ddof=1; NaN when n < 2), and the counts ``n_diverged``, ``n_error``
    (error or timeout), ``n_missing`` (ok runs without the metric) and ``n_runs`` (all runs of the cell)."""
    status = runs["status"]
    unknown = set(status) - set(COUNTED_STATUSES)
    if unknown:
        raise ValueError(f"unknown run status {sorted(unknown)}; valid: {', '.join(COUNTED_STATUSES)}")
    values = _ok_values(runs, metric)
    grouped = values.groupby(_key(values, key))[metric]
    summary = pd.DataFrame({"n": grouped.count(), "mean": grouped.mean(), "std": grouped.std(ddof=1)})
    counted = runs.assign(
        n_diverged=status == "diverged",
        n_error=status.isin(["error", "timeout"]),
        n_missing=(status == "ok") & ~np.isfinite(runs[metric].astype(float)),
        n_runs=1,
    )
    counts = counted.groupby(_key(counted, key))[["n_diverged", "n_error", "n_missing", "n_runs"]].sum()
    out = counts.join(summary, how="left").reset_index()
    out["n"] = out["n"].fillna(0).astype(int)
    out.insert(0, "metric", metric)
    return out[["metric", *(CELL if key is None else key), "n", "mean", "std", "n_diverged", "n_error", "n_missing",
                "n_runs"]]


def _key(runs: pd.DataFrame, key: Sequence[str] | None) -> list:
    """What :func:`summarize_cells` groups ``runs`` by: ``key``, else model, dataset and each run's row."""
    return ["model", "dataset", row_names(runs)] if key is None else list(key)


@dataclass(frozen=True)
class TestResult:
    """A two-sample test of ``a`` (regularizer) against ``b`` (baseline): statistic ``t``, two-sided ``p``,
    degrees of freedom ``df``, sample sizes (pairs for the paired test) and a ``flag`` for degenerate data."""

    t: float
    p: float
    df: float
    n_a: int
    n_b: int
    flag: str = ""


def _constant(x: np.ndarray) -> bool:
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.abs(x).max())))


def two_sample_test(a, b, test: str = "student", seeds_a=None, seeds_b=None) -> TestResult:
    """Two-sided test of equal means of samples ``a`` and ``b``.

    ``student``: ``scipy.stats.ttest_ind`` (pooled variance, df = n_a + n_b - 2), as in the paper;
    ``welch``: ``ttest_ind(equal_var=False)`` (Welch-Satterthwaite df); ``paired``: ``scipy.stats.ttest_rel``
    on the seeds present in both samples (``seeds_a``/``seeds_b`` give each value's seed), df = pairs - 1.

    Degenerate data is flagged rather than raised: fewer than 2 values (pairs) on a side gives
    ``p = NaN`` and ``"too few runs"``; samples (paired differences) that are all equal give ``t = 0``,
    ``p = 1`` and ``"identical"``; zero variance with different means gives scipy's infinite t with p = 0,
    flagged ``"zero variance"``.
    """
    check_test(test)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if test == "paired":
        a, b = _pair(a, b, seeds_a, seeds_b)
    return two_sample_tests([(a, b)], test)[0]


def two_sample_tests(pairs: list[tuple[np.ndarray, np.ndarray]], test: str = "student") -> list[TestResult]:
    """:func:`two_sample_test` of every ``(a, b)`` in ``pairs`` (for ``paired``, already aligned by seed), the
    pairs of equal sample sizes stacked for one scipy call each (``axis=1``): the same numbers as a call per
    pair, which at thousands of cells cost more than the rest of a report."""
    check_test(test)
    out: list[TestResult | None] = [None] * len(pairs)
    shapes: dict[tuple[int, int], list[int]] = {}
    arrays = [(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)) for a, b in pairs]
    degenerate, spreadless = {}, False
    for i, (a, b) in enumerate(arrays):
        if min(len(a), len(b)) < 2:
            out[i] = TestResult(math.nan, math.nan, math.nan, len(a), len(b), TOO_FEW)
            continue
        if test == "paired":
            degenerate[i] = _constant(a - b)
            identical = degenerate[i] and abs(float(np.mean(a - b))) <= 1e-12
        else:
            degenerate[i] = _constant(a) and _constant(b)
            identical = degenerate[i] and _constant(np.concatenate([a, b]))
        if identical:
            df = len(a) - 1 if test == "paired" else len(a) + len(b) - 2
            out[i] = TestResult(0.0, 1.0, float(df), len(a), len(b), IDENTICAL)
            continue
        spreadless = spreadless or degenerate[i] or _constant(a) or _constant(b)
        shapes.setdefault((len(a), len(b)), []).append(i)
    for (n_a, n_b), rows in shapes.items():
        a, b = np.stack([arrays[i][0] for i in rows]), np.stack([arrays[i][1] for i in rows])
        with warnings.catch_warnings():
            # scipy warns about precision loss whenever one sample is constant (e.g. equal accuracies on a
            # small test split); the pooled or paired statistic stays well defined, and the flags say why.
            if spreadless:
                warnings.simplefilter("ignore", RuntimeWarning)
            res = (stats.ttest_rel(a, b, axis=1) if test == "paired"
                   else stats.ttest_ind(a, b, axis=1, equal_var=test == "student"))
        df = np.broadcast_to(res.df, res.statistic.shape)
        for j, i in enumerate(rows):
            out[i] = TestResult(float(res.statistic[j]), float(res.pvalue[j]), float(df[j]), n_a, n_b,
                                ZERO_VARIANCE if degenerate[i] else "")
    return out  # type: ignore[return-value]


def _pair(a: np.ndarray, b: np.ndarray, seeds_a, seeds_b) -> tuple[np.ndarray, np.ndarray]:
    if seeds_a is None or seeds_b is None:
        raise ValueError("the paired test needs seeds_a and seeds_b to match runs by seed")
    sa, sb = pd.Series(a, index=np.asarray(seeds_a)), pd.Series(b, index=np.asarray(seeds_b))
    for name, s in (("a", sa), ("b", sb)):
        if s.index.has_duplicates:
            raise ValueError(f"the paired test needs one run per seed; sample {name} repeats seeds "
                             f"{sorted(set(s.index[s.index.duplicated()]))}")
    common = sa.index.intersection(sb.index).sort_values()
    return sa[common].to_numpy(), sb[common].to_numpy()


def compare_to_baseline(
    runs: pd.DataFrame, metric: str, *, test: str = "student", alpha: float = 0.05,
    strong_alpha: float | None = None, baseline: str = BASELINE, name: str | None = None,
) -> pd.DataFrame:
    """Test every cell against ``baseline`` within each (model, dataset) with :func:`two_sample_test`; the column
    ``name`` names the cells (default: each run's row,
    :func:`~ndebench.platform.report.statistics.rows.row_names`, called ``regularizer`` in the result; e.g.
    ``label``, where variant cells of one regularizer are cells of their own).

    One row per non-baseline cell whose (model, dataset) has the baseline: ``n``, ``mean``,
    ``n_baseline``, ``mean_baseline``, ``difference`` (mean - mean_baseline), ``t``, ``p``, ``df``,
    ``direction`` (``better``/``worse``/``equal`` given the metric's direction; ``""`` when a side has no
    runs), ``marker`` (:func:`significance_marker`), ``flag``, the 95% interval of the difference and Hedges'
    g with its interval for the same test (:func:`~ndebench.platform.report.statistics.effects.effect_sizes`), and
    ``p_holm``:
    the p-values Holm-adjusted over all rows of this call (``multipletests(method="holm")``), for readers
    who want the family-wise view.
    """
    check_test(test)
    higher = higher_is_better(metric)
    values = _ok_values(runs, metric)
    named = row_names(values) if name is None else values[name]
    column = str(named.name)
    key = [values["model"], values["dataset"], named]
    repeated = pd.concat([*key, values["seed"]], axis=1)
    repeated = repeated[repeated.duplicated(keep=False)]
    if test == "paired" and len(repeated):
        cells = sorted(set(repeated.itertuples(index=False, name=None)))
        raise ValueError(f"the paired test needs one ok run per seed and cell; repeated (model, dataset, "
                         f"{column}, seed): {cells}")
    # Each cell's values and seeds as arrays: slicing a frame per cell cost more than its tests.
    measured, seeds = values[metric].to_numpy(float), values["seed"].to_numpy()
    by_cell = {cell: (measured[at], seeds[at]) for cell, at in values.groupby(key, sort=False).indices.items()}
    none = (measured[:0], seeds[:0])
    cells = []
    every = row_names(runs) if name is None else runs[name]
    for (model, dataset), names in every.groupby([runs["model"], runs["dataset"]], sort=True).unique().items():
        if baseline not in set(names):
            continue
        base, base_seeds = by_cell.get((model, dataset, baseline), none)
        for regularizer in sorted(set(names) - {baseline}):
            reg, reg_seeds = by_cell.get((model, dataset, regularizer), none)
            paired = _pair(reg, base, reg_seeds, base_seeds) if test == "paired" else (reg, base)
            cells.append(((model, dataset, regularizer), reg, base, paired))
    tests = two_sample_tests([paired for *_, paired in cells], test)
    effects = effect_sizes_many([paired for *_, paired in cells], test)
    rows = []
    for ((model, dataset, regularizer), reg, base, _), res, effect in zip(cells, tests, effects, strict=True):
        difference = float(np.mean(reg) - np.mean(base)) if len(reg) and len(base) else math.nan
        rows.append({
            "metric": metric, "model": model, "dataset": dataset, column: regularizer,
            "baseline": baseline, "test": test,
            "n": res.n_a, "mean": float(np.mean(reg)) if len(reg) else math.nan,
            "n_baseline": res.n_b, "mean_baseline": float(np.mean(base)) if len(base) else math.nan,
            "difference": difference, "t": res.t, "p": res.p, "df": res.df,
            "direction": _direction(difference, higher),
            "marker": significance_marker(res.p, alpha, strong_alpha), "flag": res.flag,
            **effect,
        })
    out = pd.DataFrame(rows, columns=[
        "metric", "model", "dataset", column, "baseline", "test", "n", "mean", "n_baseline", "mean_baseline",
        "difference", "t", "p", "df", "direction", "marker", "flag", *EFFECT_COLUMNS])
    out["p_holm"] = adjust(out["p"].to_numpy(dtype=float), CORRECTION, alpha)
    return out


def note(comparison: Mapping[str, Any]) -> str:
    """The console's word for one row of :func:`compare_to_baseline` (after any correction): ``better`` or
    ``worse`` only where its ``marker`` says the test found it, else the raw sign, ``higher (n.s.)`` or
    ``lower (n.s.)`` (``(untested)`` where there is no p-value); ``equal`` and ``""`` as they are."""
    direction = comparison["direction"]
    if direction not in ("better", "worse") or comparison["marker"]:
        return direction
    sign = "higher" if comparison["difference"] > 0 else "lower"
    return f"{sign} ({'n.s.' if math.isfinite(comparison['p']) else 'untested'})"


def _direction(difference: float, higher: bool) -> str:
    if math.isnan(difference):
        return ""
    if math.isclose(difference, 0.0, abs_tol=1e-12):
        return "equal"
    return "better" if (difference > 0) == higher else "worse"


def min_wilcoxon_p(n: int) -> float:
    """Smallest two-sided exact p-value of the Wilcoxon signed-rank test with n non-zero differences:
    all signs equal, ``2 / 2**n`` (0.0625 for n = 5, 0.03125 for n = 6)."""
    return min(1.0, 2.0 / 2**n)


def compare_across_datasets(
    runs: pd.DataFrame, metrics: dict[str, str], *, alpha: float = 0.05, baseline: str = BASELINE
) -> pd.DataFrame:
    """Per (model, regularizer), compare against ``baseline`` over the datasets both were run on.

    ``metrics`` maps each dataset to the metric compared on it (e.g. its primary metric). With per-dataset
    means ``r_d`` and ``b_d`` and ``s = +1`` if higher is better else ``-1``, the improvement is
    ``d_d = s (r_d - b_d)``. Columns: ``n_datasets``, ``mean_improvement`` (mean of d), ``se``
    (``scipy.stats.sem``, ddof=1), ``ci_low``/``ci_high`` (its 95% Student-t interval), ``pct_change`` (mean
    of ``100 d_d / |b_d|``) and its ``pct_se``, ``wins`` (d > 0),
    ``wilcoxon`` statistic and ``p`` (``scipy.stats.wilcoxon`` of r against b, two-sided; sign-adjusted so
    the test matches d), ``p_holm`` (Holm over all rows: ``multipletests(method="holm")``), ``significant``
    (p_holm < alpha), and ``note`` saying when the test is degenerate or when, with n datasets,
    ``2 / 2**n >= alpha`` so that it cannot reach significance (fewer than 6 datasets at alpha 0.05).
    """
    means = _signed_means(runs, metrics)
    rows = []
    for model, regularizer in sorted(means.index):
        if regularizer == baseline:
            continue
        reg = means.loc[(model, regularizer)]
        base = means.loc[(model, baseline)] if (model, baseline) in means.index else reg * math.nan
        common = sorted(d for d in means.columns if np.isfinite(reg[d]) and np.isfinite(base[d]))
        # Signed means: s r_d - s b_d = d_d, and |s b_d| = |b_d| for the percentage.
        r, b = reg[common].to_numpy(float), base[common].to_numpy(float)
        d = r - b
        rows.append({"model": model, "regularizer": regularizer, "baseline": baseline, "n_datasets": len(common),
                     "datasets": common, **_improvement(d, b), **_wilcoxon(d, alpha)})
    return _across_frame(rows, alpha)


def _improvement(d: np.ndarray, b: np.ndarray) -> dict:
    if not len(d):
        return {"mean_improvement": math.nan, "se": math.nan, "ci_low": math.nan, "ci_high": math.nan,
                "pct_change": math.nan, "pct_se": math.nan, "wins": 0}
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = 100.0 * d / np.abs(b)
    low, high = mean_interval(d)
    return {"mean_improvement": float(np.mean(d)), "se": float(stats.sem(d)) if len(d) > 1 else math.nan,
            "ci_low": low, "ci_high": high,
            "pct_change": float(np.mean(pct)), "pct_se": float(stats.sem(pct)) if len(d) > 1 else math.nan,
            "wins": int(np.sum(d > 0))}


def _wilcoxon(d: np.ndarray, alpha: float) -> dict:
    n = len(d)
    if n == 0:
        return {"wilcoxon": math.nan, "p": math.nan, "note": "no datasets with both runs"}
    if np.all(d == 0):
        return {"wilcoxon": math.nan, "p": 1.0, "note": f"{IDENTICAL} on all {n} datasets"}
    statistic, p = signed_rank_test(d)
    nonzero = int(np.count_nonzero(d))
    note = ""
    if min_wilcoxon_p(nonzero) >= alpha:
        note = (f"Wilcoxon signed-rank cannot reach p < {alpha:g} with {nonzero} dataset(s) "
                f"(smallest possible p = {min_wilcoxon_p(nonzero):.4g}; needs at least "
                f"{_datasets_needed(alpha)} datasets)")
    return {"wilcoxon": statistic, "p": p, "note": note}


# scipy's "auto" method enumerates every sign flip when there are ties or zeros and n <= 13 (2**13 <= its 9999
# resamples), calling its statistic once per flip in Python: seconds a test.
_PERMUTED = 13


def signed_rank_test(d: np.ndarray) -> tuple[float, float]:
    """``scipy.stats.wilcoxon(d)`` (two-sided, method ``auto``): its statistic and p-value, the same, for differences
    ``d`` of shape (n,): where scipy runs its exact permutation test (ties or zeros, n <= 13) the sign-flip
    statistic ``R+`` (the sum of the ranks of ``|d|`` over ``d > 0``, zeros dropped) is evaluated on all
    ``2**n`` flips at once instead of one flip at a time."""
    d = np.asarray(d, dtype=float)
    if len(d) > _PERMUTED or not (np.any(d == 0) or len(np.unique(np.abs(d))) < len(d)):
        res = stats.wilcoxon(d)
        return float(res.statistic), float(res.pvalue)
    p = stats.permutation_test((d,), _positive_rank_sum, vectorized=True, permutation_type="samples",
                               alternative="two-sided", axis=-1).pvalue
    return float(stats.wilcoxon(d, method="asymptotic").statistic), float(p)


def _positive_rank_sum(d: np.ndarray, axis: int = -1) -> np.ndarray:
    # scipy's one-sided statistic is R+ whatever the method; "asymptotic" adds no enumeration of its own.
    return stats.wilcoxon(d, method="asymptotic", alternative="greater", axis=axis).statistic


def _datasets_needed(alpha: float) -> int:
    n = 1
    while min_wilcoxon_p(n) >= alpha:
        n += 1
    return n


def _across_frame(rows: list[dict], alpha: float = 0.05) -> pd.DataFrame:
    out = pd.DataFrame(rows, columns=[
        "model", "regularizer", "baseline", "n_datasets", "datasets", "mean_improvement", "se", "ci_low", "ci_high",
        "pct_change",
        "pct_se", "wins", "wilcoxon", "p", "note"])
    out["p_holm"] = adjust(out["p"].to_numpy(dtype=float), CORRECTION, alpha)
    out["significant"] = out["p_holm"] < alpha
    out["correction"] = CORRECTION
    return out


def _signed_means(runs: pd.DataFrame, metrics: dict[str, str], model: str | None = None,
                  name: str | None = None) -> pd.DataFrame:
    """Per-cell means sign-adjusted so that higher is better (``-mean`` for NLL, ECE): one row per (model, row)
    (only ``model``'s when given; the column ``name`` names the cells where given), one column per dataset of
    ``metrics``; NaN where a cell has no mean."""
    cell, key = ["model", name or "regularizer"], None if name is None else ["model", "dataset", name]
    part = runs if model is None else runs[runs["model"] == model]
    datasets_of: dict[str, list[str]] = {}
    for dataset, metric in metrics.items():
        datasets_of.setdefault(metric, []).append(dataset)
    # One pass over the runs per metric: a cell's statistics do not depend on the other datasets in the pass.
    frames = []
    for metric, datasets in datasets_of.items():
        sign = 1.0 if higher_is_better(metric) else -1.0
        cells = summarize_cells(part[part["dataset"].isin(datasets)], metric, key)
        frames.append(cells.assign(mean=cells["mean"] * sign).pivot(index=cell, columns="dataset", values="mean"))
    index = pd.MultiIndex.from_tuples([], names=cell)
    out = pd.concat(frames, axis=1).sort_index() if frames else pd.DataFrame(index=index)
    out = out.reindex(columns=list(metrics)).astype(float)
    out.columns.name = None
    return out


def signed_means(runs: pd.DataFrame, metrics: dict[str, str], model: str) -> pd.DataFrame:
    """Per-cell means of ``model``: one row per table row, one column per dataset where every row
    has a mean, sign-adjusted so that higher is better (``-mean`` for NLL, ECE)."""
    return _signed_means(runs, metrics, model).droplevel("model").dropna(axis=1)


def average_ranks(runs: pd.DataFrame, metrics: dict[str, str], model: str) -> pd.Series:
    """Mean rank of each regularizer of ``model`` over the datasets where all of them have a mean
    (rank 1 = best, ties averaged, ``scipy.stats.rankdata``), sorted best first: the axis of a
    critical-difference diagram."""
    frame = -signed_means(runs, metrics, model)
    if frame.empty:
        return pd.Series(dtype=float)
    ranks = frame.apply(lambda column: pd.Series(stats.rankdata(column), index=column.index))
    return ranks.mean(axis=1).sort_values()


def pairwise_wilcoxon(runs: pd.DataFrame, metrics: dict[str, str], model: str, alpha: float = 0.05,
                      name: str | None = None) -> pd.DataFrame:
    """Wilcoxon signed-rank p-value of every pair of rows of ``model`` (cells named by the column ``name`` where
    given) over the datasets where both have a mean, Holm-adjusted over all pairs; columns ``a, b, n_datasets, p,
    p_holm``. Pairs whose ``p_holm >= alpha`` are joined by a bar in the critical-difference diagram."""
    frame = _signed_means(runs, metrics, model, name).droplevel("model")
    rows = []
    names = list(frame.index)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = frame.loc[[a, b]].dropna(axis=1)
            d = (both.loc[a] - both.loc[b]).to_numpy(float)
            rows.append({"a": a, "b": b, "n_datasets": len(d), "p": _wilcoxon(d, alpha)["p"]})
    out = pd.DataFrame(rows, columns=["a", "b", "n_datasets", "p"])
    out["p_holm"] = adjust(out["p"].to_numpy(dtype=float), CORRECTION, alpha)
    return out
