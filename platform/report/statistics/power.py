"""Power of a per-set test when seeds pair the cells, and the number of sets a study needs.

Per set, two arms of ``n`` seeds each (baseline ``b_i``, proposed ``a_i``, seed ``i`` fixing the split and the
initialisation of both): per-seed std ``sigma`` in each arm, correlation ``r`` of the arms over seeds, true gain
``delta = d sigma``. The paired differences ``a_i - b_i`` have std ``sigma_D = sigma sqrt(2 (1 - r))``.

- ``paired`` test (``scipy.stats.ttest_rel``): one-sample t on the differences, effect ``d_z = d / sqrt(2 (1 - r))``
  on ``n - 1`` df (``statsmodels`` ``TTestPower``).
- ``student`` / ``welch`` (``scipy.stats.ttest_ind``): at ``r = 0`` the two-sample t of ``statsmodels``
  ``TTestIndPower``. At ``r != 0`` the pooled variance no longer describes the noise of the difference of means
  (it overstates it when ``r > 0``), and no closed form is in statsmodels: the power is the share of
  :data:`SIMULATIONS` draws of correlated normal pairs (fixed seed :data:`SEED`) that ``ttest_ind`` finds
  significant, its Monte-Carlo SE below 0.0012.
- Sets needed: a study's across-set mean gain over ``k`` sets with between-set std ``s`` (per-set gains, seed noise
  included) tells a true mean ``e`` from 0 with power 0.8 at the smallest ``k`` where ``TTestPower().power(e / s,
  k)`` reaches 0.8; it tells the paper's value from its own estimate at the smallest ``k`` where the Welch test of
  :func:`~ndebench.platform.report.statistics.agreement.power` with SE ``sqrt(s^2 / k + se_p^2)`` reaches 0.8.
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np
from ndebench.platform.report.statistics.agreement import ALPHA, POWER, power
from scipy import stats as sps
from statsmodels.stats.power import TTestIndPower, TTestPower

SIMULATIONS = 200_000
SEED = 0
MAX_SETS = 1000
"""Sets needed beyond this are reported as never: the paper's own SE caps the power below the target."""
TESTS = ("student", "welch", "paired")


def _check(test: str) -> None:
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; valid: {', '.join(TESTS)}")


@cache
def _simulated(d: float, r: float, seeds: int, alpha: float, equal_var: bool) -> float:
    rng = np.random.default_rng(SEED)
    base = rng.standard_normal((SIMULATIONS, seeds))
    other = r * base + math.sqrt(1 - r ** 2) * rng.standard_normal((SIMULATIONS, seeds)) + d
    return float(np.mean(sps.ttest_ind(other, base, axis=1, equal_var=equal_var).pvalue < alpha))


def per_set_power(d: float, r: float, test: str, seeds: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided per-set ``test`` at level ``alpha`` against a gain of ``d`` per-seed stds, arms of
    ``seeds`` seeds correlated at ``r`` (module docstring); ``r`` in ``(-1, 1)``, 0 for independent arms."""
    _check(test)
    if not -1 < r < 1:
        raise ValueError(f"the arms' correlation must lie in (-1, 1), got {r}")
    if test == "paired":
        d_z = d / math.sqrt(2 * (1 - r))
        # the two tails apart: statsmodels' far lower tail is NaN where it is below 1e-16
        return float(TTestPower().power(d_z, nobs=seeds, alpha=alpha / 2, alternative="larger")
                     + np.nan_to_num(TTestPower().power(d_z, nobs=seeds, alpha=alpha / 2, alternative="smaller")))
    if r == 0:
        return float(TTestIndPower().power(d, nobs1=seeds, alpha=alpha, ratio=1.0))
    return _simulated(round(d, 12), round(r, 12), seeds, alpha, test == "student")


def per_set_mde(sd_difference: float, sd_pooled: float, test: str, seeds: int, alpha: float = ALPHA) -> float:
    """The smallest per-set gain ``test`` detects with power 0.8 on ``seeds`` seeds per arm: ``d_z x sd_difference``
    (paired, the std of the seed-wise differences) or ``d x sd_pooled`` (two-sample, the pooled per-seed std)."""
    _check(test)
    if test == "paired":
        scale, d = sd_difference, TTestPower().solve_power(None, nobs=seeds, alpha=alpha, power=POWER)
    else:
        scale, d = sd_pooled, TTestIndPower().solve_power(None, nobs1=seeds, alpha=alpha, power=POWER)
    return float(d) * scale if math.isfinite(scale) and scale > 0 else math.nan


def sets_to_detect(effect: float, spread: float, alpha: float = ALPHA) -> float:
    """Sets a study needs to tell a mean gain ``effect`` from 0 with power 0.8, per-set gains spread with std
    ``spread`` (module docstring); NaN without a positive spread or effect."""
    if not (math.isfinite(spread) and spread > 0 and math.isfinite(effect) and effect != 0):
        return math.nan
    # the smallest integer k, searched directly: statsmodels' solve_power fails to bracket at very large effects
    size = abs(effect) / spread
    return next((float(k) for k in range(2, MAX_SETS + 1)
                 if TTestPower().power(size, nobs=k, alpha=alpha) >= POWER), math.inf)


def sets_to_distinguish(difference: float, spread: float, se_paper: float, df_paper: float,
                        alpha: float = ALPHA) -> float:
    """The fewest sets at which the Welch test of study minus paper reaches power 0.8 against ``difference``,
    the study's per-set gains spread with std ``spread``, the paper's mean with SE ``se_paper`` on ``df_paper``
    df; ``inf`` when not within :data:`MAX_SETS` (the paper's SE alone caps the power)."""
    if not (math.isfinite(spread) and spread > 0 and math.isfinite(difference) and difference != 0):
        return math.nan
    for k in range(2, MAX_SETS + 1):
        se_s = spread / math.sqrt(k)
        var = se_s ** 2 + se_paper ** 2
        df = var ** 2 / (se_s ** 4 / (k - 1) + se_paper ** 4 / df_paper)
        if power(difference, math.sqrt(var), df, alpha) >= POWER:
            return float(k)
    return math.inf
