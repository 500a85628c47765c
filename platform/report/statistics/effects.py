"""Effect sizes of a comparison with the baseline: the mean difference with its confidence interval, and
Hedges' g with its interval, each matching the t-test in use.

Difference ``a - b`` (regularizer minus baseline): its interval is scipy's own for the test
(``ttest_ind(...).confidence_interval`` pooled or Welch, ``ttest_rel(...).confidence_interval`` on the seeds
both sides share for ``paired``). Hedges' g is Cohen's d times the small-sample correction
``J = 1 - 3 / (4 df - 1)``:

* ``student``: ``d = (mean_a - mean_b) / s_p``, ``s_p`` the pooled standard deviation, ``df = n_a + n_b - 2``;
* ``welch``: ``d = (mean_a - mean_b) / sqrt((s_a^2 + s_b^2) / 2)`` (the average-variance standardizer, which
  does not assume equal variances), same ``df``;
* ``paired``: ``d_z = mean(a - b) / sd(a - b)``, ``df = n - 1``.

Its interval is the large-sample normal one of Hedges & Olkin (1985): ``g +- z SE`` with
``SE^2 = 1/n_a + 1/n_b + g^2 / (2 (n_a + n_b))`` (two samples) or ``1/n + g^2 / (2 n)`` (paired).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
COLUMNS = ("diff_ci_low", "diff_ci_high", "hedges_g", "hedges_g_ci_low", "hedges_g_ci_high")


def _nan() -> dict[str, float]:
    return dict.fromkeys(COLUMNS, math.nan)


def _flat(x: np.ndarray) -> bool:
    """No spread beyond rounding (equal accuracies on a small test split differ in the last bits)."""
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.abs(x).max())))


def effect_sizes(a: Any, b: Any, test: str = "student", confidence: float = CONFIDENCE) -> dict[str, float]:
    """``diff_ci_low/high`` (interval of ``mean(a) - mean(b)``) and ``hedges_g`` with ``hedges_g_ci_low/high``
    for samples ``a`` and ``b`` under ``test`` (``student``, ``welch`` or ``paired``; for ``paired``, ``a`` and
    ``b`` are aligned by seed). NaN where a side has fewer than two values or the samples have no spread."""
    return effect_sizes_many([(a, b)], test, confidence)[0]


def effect_sizes_many(pairs: list[tuple[Any, Any]], test: str = "student",
                      confidence: float = CONFIDENCE) -> list[dict[str, float]]:
    """:func:`effect_sizes` of every ``(a, b)`` in ``pairs``, the pairs of equal sample sizes ``(n_a, n_b)``
    stacked into ``(k, n_a)`` and ``(k, n_b)`` arrays for one scipy call each: numpy reduces each row of a
    stacked array as it reduces the row alone, so the numbers are the per-pair ones bit for bit."""
    out: list[dict[str, float]] = [_nan() for _ in pairs]
    shapes: dict[tuple[int, int], list[int]] = {}
    arrays = [(np.asarray(a, dtype=float), np.asarray(b, dtype=float)) for a, b in pairs]
    for i, (a, b) in enumerate(arrays):
        if test == "paired" and len(a) != len(b):
            raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
        if min(len(a), len(b)) < 2 or (_flat(a - b) if test == "paired" else _flat(a) and _flat(b)):
            continue
        shapes.setdefault((len(a), len(b)), []).append(i)
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    for (n_a, n_b), rows in shapes.items():
        a, b = np.stack([arrays[i][0] for i in rows]), np.stack([arrays[i][1] for i in rows])
        if test == "paired":
            diff = a - b
            ci = sps.ttest_rel(a, b, axis=1).confidence_interval(confidence)
            df = n_a - 1
            g = diff.mean(axis=1) / diff.std(axis=1, ddof=1) * (1 - 3 / (4 * df - 1))
            se = np.sqrt(1 / n_a + g * g / (2 * n_a))
        else:
            var_a, var_b = a.var(axis=1, ddof=1), b.var(axis=1, ddof=1)
            df = n_a + n_b - 2
            if test == "student":
                scale = np.sqrt(((n_a - 1) * var_a + (n_b - 1) * var_b) / df)
            else:
                scale = np.sqrt((var_a + var_b) / 2)
            ci = sps.ttest_ind(a, b, axis=1, equal_var=test == "student").confidence_interval(confidence)
            g = (a.mean(axis=1) - b.mean(axis=1)) / scale * (1 - 3 / (4 * df - 1))
            se = np.sqrt(1 / n_a + 1 / n_b + g * g / (2 * (n_a + n_b)))
        for j, i in enumerate(rows):
            out[i] = {"diff_ci_low": float(ci.low[j]), "diff_ci_high": float(ci.high[j]), "hedges_g": float(g[j]),
                      "hedges_g_ci_low": float(g[j] - z * se[j]), "hedges_g_ci_high": float(g[j] + z * se[j])}
    return out


def mean_interval(values: Any, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (``ttest_1samp(...).confidence_interval``); NaN for fewer
    than two values or no spread."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2 or _flat(values):
        return math.nan, math.nan
    ci = sps.ttest_1samp(values, 0.0).confidence_interval(confidence)
    return float(ci.low), float(ci.high)
