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
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if test == "paired" and len(a) != len(b):
        raise ValueError(f"paired samples need equal lengths, got {len(a)} and {len(b)}")
    if min(len(a), len(b)) < 2:
        return _nan()
    if test == "paired":
        diff = a - b
        if _flat(diff):
            return _nan()
        spread = float(diff.std(ddof=1))
        ci = sps.ttest_rel(a, b).confidence_interval(confidence)
        n, df = len(diff), len(diff) - 1
        g = float(diff.mean()) / spread * (1 - 3 / (4 * df - 1))
        se = math.sqrt(1 / n + g * g / (2 * n))
    else:
        if _flat(a) and _flat(b):
            return _nan()
        var_a, var_b = float(a.var(ddof=1)), float(b.var(ddof=1))
        df = len(a) + len(b) - 2
        if test == "student":
            scale = math.sqrt(((len(a) - 1) * var_a + (len(b) - 1) * var_b) / df)
        else:
            scale = math.sqrt((var_a + var_b) / 2)
        ci = sps.ttest_ind(a, b, equal_var=test == "student").confidence_interval(confidence)
        g = (float(a.mean()) - float(b.mean())) / scale * (1 - 3 / (4 * df - 1))
        se = math.sqrt(1 / len(a) + 1 / len(b) + g * g / (2 * (len(a) + len(b))))
    z = float(sps.norm.ppf(0.5 + confidence / 2))
    return {"diff_ci_low": float(ci.low), "diff_ci_high": float(ci.high), "hedges_g": g,
            "hedges_g_ci_low": g - z * se, "hedges_g_ci_high": g + z * se}


def mean_interval(values: Any, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (``ttest_1samp(...).confidence_interval``); NaN for fewer
    than two values or no spread."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2 or _flat(values):
        return math.nan, math.nan
    ci = sps.ttest_1samp(values, 0.0).confidence_interval(confidence)
    return float(ci.low), float(ci.high)
