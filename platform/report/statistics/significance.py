"""Which comparisons a report marks significant: multiple-testing correction, direction-aware markers and the
Friedman gate of the critical-difference diagram.

A table marks a cell against the baseline with ``*`` / ``**`` when it is significantly **better** and with
``†`` / ``††`` when it is significantly **worse**, using the p-values after ``correction`` over the table's
family of comparisons: ``none`` (raw p, as in the paper), ``holm`` (family-wise error) or ``bh``
(Benjamini-Hochberg false-discovery rate), all from ``statsmodels.stats.multitest.multipletests``.
"""
from __future__ import annotations

import gc
import math

import numpy as np
import pandas as pd
from ndebench.platform.common.choices import CORRECTIONS
from scipy import stats
from statsmodels.stats.multitest import multipletests

_METHODS = {"holm": "holm", "bh": "fdr_bh"}
BETTER, WORSE = "*", "†"
MIN_CD_DATASETS = 6
CORRECTION_TEXT = {
    "none": "unadjusted p-values",
    "holm": "Holm-adjusted p-values (family-wise error over the {n} comparisons of this table)",
    "bh": "Benjamini-Hochberg-adjusted p-values (false-discovery rate over the {n} comparisons of this table)",
}


def check_correction(correction: str) -> str:
    """``correction`` if it names one of :data:`CORRECTIONS`, else an error listing them."""
    if correction not in CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; valid corrections: {', '.join(CORRECTIONS)}")
    return correction


def adjust(p: np.ndarray, correction: str, alpha: float = 0.05) -> np.ndarray:
    """p-values adjusted by ``correction`` over the finite entries of ``p`` (NaN stays NaN, outside the family)."""
    check_correction(correction)
    p = np.asarray(p, dtype=float)
    out = p.copy()
    finite = np.isfinite(p)
    if correction != "none" and finite.any():
        # statsmodels' Holm runs a full garbage collection, whose cost grows with everything the report holds
        # (the study's runs); frozen objects are skipped by it.
        gc.freeze()
        try:
            out[finite] = multipletests(p[finite], alpha=alpha, method=_METHODS[correction])[1]
        finally:
            gc.unfreeze()
    return out


def marker(p: float, direction: str, alpha: float, strong_alpha: float) -> str:
    """``*``/``**`` for a significantly better result, ``†``/``††`` for a worse one (``p < alpha`` once,
    ``p < strong_alpha`` twice); ``""`` when not significant, for NaN, or without a direction."""
    if not p < alpha or direction not in ("better", "worse"):
        return ""
    symbol = BETTER if direction == "better" else WORSE
    return symbol * (2 if p < strong_alpha else 1)


def mark(comparisons: pd.DataFrame, alpha: float, correction: str) -> pd.DataFrame:
    """``comparisons`` (from :func:`~ndebench.platform.report.statistics.stats.compare_to_baseline`) with
    ``correction``,
    ``p_adjusted`` and ``marker`` recomputed from the adjusted p-values and the direction of each difference."""
    out = comparisons.copy()
    out["correction"] = check_correction(correction)
    out["p_adjusted"] = adjust(out["p"].to_numpy(dtype=float), correction, alpha)
    strong = alpha / 5
    out["marker"] = [marker(p, d, alpha, strong) for p, d in zip(out["p_adjusted"], out["direction"], strict=True)]
    return out


def caption(correction: str, n_tests: int, alpha: float, tex: bool = False) -> str:
    """The marker legend of a caption: which symbols, which thresholds, which p-values."""
    star = (lambda m: f"$^{{{m}}}$") if tex else (lambda m: "\\" + "\\".join(m))
    dagger = (lambda m: "$^{" + m.replace("†", r"\dagger") + "}$") if tex else (lambda m: m)
    below = (lambda x: f"$p < {x:g}$") if tex else (lambda x: f"p < {x:g}")
    used = CORRECTION_TEXT[correction].format(n=n_tests)
    return (f"{star('*')}/{dagger('†')} significantly better/worse with {below(alpha)}, "
            f"{star('**')}/{dagger('††')} with {below(alpha / 5)}, on {used}")


def friedman_gate(ranks_input: pd.DataFrame, alpha: float) -> tuple[bool, str]:
    """Whether a critical-difference diagram may be drawn for one model, and the sentence saying why (not).

    ``ranks_input`` has one row per regularizer and one column per dataset (sign-adjusted means, higher is
    better, datasets with a missing cell dropped). The diagram needs at least :data:`MIN_CD_DATASETS`
    datasets (with fewer, no pairwise Wilcoxon test can reach p < 0.05), at least three methods (the
    Friedman test's minimum) and a Friedman test (``scipy.stats.friedmanchisquare``) with p < ``alpha``.
    """
    k, n = ranks_input.shape
    if n < MIN_CD_DATASETS:
        return False, (f"no critical-difference diagram: {n} dataset(s) with every method, fewer than the "
                       f"{MIN_CD_DATASETS} the tests need to separate methods")
    if k < 3:
        return False, (f"no critical-difference diagram: {k} method(s); the Friedman test needs at least 3 "
                       "(see the across-dataset Wilcoxon table)")
    result = stats.friedmanchisquare(*ranks_input.to_numpy(dtype=float))
    p = float(result.pvalue)
    if not p < alpha or math.isnan(p):
        return False, (f"no critical-difference diagram: the Friedman test over {n} datasets and {k} methods "
                       f"does not reject equal ranks (chi2 = {result.statistic:.3f}, p = {p:.4g} >= {alpha:g})")
    return True, (f"Friedman test over {n} datasets and {k} methods: chi2 = {result.statistic:.3f}, "
                  f"p = {p:.4g} < {alpha:g}; pairwise bars from Holm-adjusted Wilcoxon tests")
