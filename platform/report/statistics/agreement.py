"""Agreement of a study's estimate with a published one, from summary statistics on both sides: intervals, the
Welch difference, an equivalence test (TOST), power and the minimum detectable effect, and the verdict rule.

Each side is an estimate ``m`` with standard error ``se`` on ``df`` degrees of freedom (a mean over ``n`` seeds:
``se = std / sqrt(n)``, ``df = n - 1``; a mean over ``k`` datasets: the SEM over them, ``df = k - 1``).

- Interval: ``m +- t_{0.975, df} se``.
- A standard error at float noise (below :data:`SE_TOLERANCE` x the larger |mean|, at least 1) is no measurement:
  it counts as missing, as do NaN ones.
- Difference study - paper (Welch): ``d = m_s - m_p``, ``se_d = sqrt(se_s^2 + se_p^2)``, Welch-Satterthwaite
  ``df_d = se_d^4 / (se_s^4 / df_s + se_p^4 / df_p)``; two-sided p of ``d / se_d`` on ``t(df_d)``.
- Equivalence (two one-sided tests, Schuirmann 1987) with margin ``delta``: ``H0: |d| >= delta``;
  ``p = max(P(T >= (d + delta) / se_d), P(T <= (d - delta) / se_d))``; ``p < alpha`` iff the ``1 - 2 alpha``
  interval of ``d`` lies inside ``(-delta, delta)``.
- Power of a two-sided t-test at level alpha against a true effect ``e``: ``P(|T'| > t_{1 - alpha/2, df})`` with
  ``T'`` non-central t on ``df`` with non-centrality ``e / se`` (as ``statsmodels.stats.power.ttest_power``, whose
  lower tail is NaN far out at df = 1, where it is below 1e-16 and counted as 0); the minimum detectable effect
  (MDE) is the ``e`` with power 0.8.
- Verdict (:data:`RULE`): ``differs`` when the Holm-adjusted p of the difference is below alpha, ``agrees`` when
  the Holm-adjusted TOST p is, else ``inconclusive``; each family (the across-dataset rows, the cells) is
  corrected over its own finite p-values (``statsmodels.stats.multitest.multipletests``, method ``holm``).
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np
from ndebench.platform.report.statistics.significance import adjust
from scipy import integrate, optimize
from scipy import stats as sps

ALPHA = 0.05
POWER = 0.8
SE_TOLERANCE = 1e-12
VERDICTS = ("agrees", "differs", "inconclusive")
RULE = ("Verdict rule: 'differs' when the 95% Welch interval of study minus paper excludes 0 after Holm's "
        "correction (adjusted p < 0.05); 'agrees' when the equivalence test (TOST) shows |study minus paper| below "
        "the margin after Holm's correction (adjusted p < 0.05); otherwise 'inconclusive': the data cannot tell "
        "the paper's value from values a margin away from it. Holm's correction runs over the finite p-values of "
        "each table (statsmodels multipletests, method holm), the difference tests and the TOSTs separately.")


def t_interval(mean: float, se: float, df: float, confidence: float = 0.95) -> tuple[float, float]:
    """``mean +- t_{(1 + confidence) / 2, df} se``; NaN without a finite ``se`` or with ``df < 1``."""
    if not (math.isfinite(mean) and math.isfinite(se) and math.isfinite(df) and df >= 1):
        return math.nan, math.nan
    half = float(sps.t.ppf(0.5 + confidence / 2, df)) * se
    return mean - half, mean + half


def welch(mean_s: float, se_s: float, df_s: float, mean_p: float, se_p: float, df_p: float,
          confidence: float = 0.95) -> dict[str, float]:
    """Study minus paper: ``difference, se, df`` (Welch-Satterthwaite), its interval ``ci_low, ci_high`` and the
    two-sided ``p`` of a zero difference (module docstring). NaN where a side lacks a standard error or df, or
    a standard error is at float noise (:func:`measured`)."""
    nan = dict.fromkeys(("se", "df", "ci_low", "ci_high", "p"), math.nan)
    difference = mean_s - mean_p
    if not (measured(se_s, mean_s, mean_p) and measured(se_p, mean_s, mean_p) and math.isfinite(df_s)
            and math.isfinite(df_p) and min(df_s, df_p) >= 1):
        return {"difference": difference, **nan}
    var = se_s ** 2 + se_p ** 2
    df = var ** 2 / (se_s ** 4 / df_s + se_p ** 4 / df_p)
    se = math.sqrt(var)
    low, high = t_interval(difference, se, df, confidence)
    p = float(2 * sps.t.sf(abs(difference) / se, df))
    return {"difference": difference, "se": se, "df": df, "ci_low": low, "ci_high": high, "p": p}


def measured(se: float, *means: float) -> bool:
    """Whether ``se`` is a standard error at all: finite and above :data:`SE_TOLERANCE` x max(1, |means|) (an SE
    of 5.6e-17 from two equal differences is float noise, not a precision)."""
    scale = max([1.0, *(abs(m) for m in means if math.isfinite(m))])
    return math.isfinite(se) and se > SE_TOLERANCE * scale


def tost(difference: float, se: float, df: float, margin: float) -> float:
    """p of the two one-sided tests of ``|difference| >= margin`` (module docstring); NaN without ``se``/``df``
    or a positive margin."""
    if not (math.isfinite(se) and se > 0 and math.isfinite(df) and margin > 0):
        return math.nan
    lower = sps.t.sf((difference + margin) / se, df)
    upper = sps.t.cdf((difference - margin) / se, df)
    return float(max(lower, upper))


def power(effect: float, se: float, df: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided t-test at level ``alpha`` on ``df`` degrees of freedom against a true effect
    ``effect`` measured with standard error ``se`` (module docstring)."""
    if not (math.isfinite(se) and se > 0 and math.isfinite(df) and df >= 1 and math.isfinite(effect)):
        return math.nan
    crit, nc = float(sps.t.isf(alpha / 2, df)), abs(effect) / se
    return float(sps.nct.sf(crit, df, nc) + np.nan_to_num(sps.nct.cdf(-crit, df, nc)))


def mde(se: float, df: float, alpha: float = ALPHA, target: float = POWER) -> float:
    """The smallest true effect the two-sided t-test detects with power ``target``: the root of
    ``power(e, se, df) = target`` (``scipy.optimize.brentq``)."""
    if not (math.isfinite(se) and se > 0 and math.isfinite(df) and df >= 1):
        return math.nan
    high = se
    while power(high, se, df, alpha) < target:
        high *= 2
    return float(optimize.brentq(lambda e: power(e, se, df, alpha) - target, 0.0, high, xtol=1e-12 * se))


def holm(p: list[float] | np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values over the finite entries of ``p`` (NaN stays NaN)."""
    return adjust(np.asarray(p, dtype=float), "holm")


def verdict(p_difference: float, p_equivalence: float, alpha: float = ALPHA) -> str:
    """The label of :data:`RULE` from the adjusted p of the difference and of the TOST."""
    if p_difference < alpha:
        return "differs"
    if p_equivalence < alpha:
        return "agrees"
    return "inconclusive"


def at_most(observed: int, powers: list[float] | np.ndarray) -> float:
    """``P(X <= observed)`` for ``X`` the number of successes of independent trials with success probabilities
    ``powers`` (the Poisson binomial distribution, by convolving the trials' Bernoulli distributions): how likely
    so few significant sets are if every set's test had the given power."""
    pmf = np.array([1.0])
    for q in np.asarray(powers, dtype=float):
        pmf = np.convolve(pmf, [1 - q, q])
    return float(pmf[: max(observed, -1) + 1].sum())


@cache
def expected_max(k: int) -> float:
    """``E[max of k independent standard normals] = int x k phi(x) Phi(x)^(k-1) dx`` (1.8675 for k = 20)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    value, _ = integrate.quad(lambda x: x * k * sps.norm.pdf(x) * sps.norm.cdf(x) ** (k - 1), -np.inf, np.inf)
    return float(value)


def chance_factor(k: int, n: int) -> float:
    """The gain, in units of the per-seed standard deviation, that choosing the best of ``k`` independent cells
    on their means of ``n`` seeds shows over one cell when none differs: ``expected_max(k) / sqrt(n)``."""
    return expected_max(k) / math.sqrt(n)
