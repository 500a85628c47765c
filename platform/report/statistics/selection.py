"""Selection-adjusted significance of a best-of-grid (oracle) result, and the gain such a selection shows by chance.

The oracle of the selection audit is the grid point with the best **test** mean among K; its difference from
``none`` is the maximum of K differences, so a plain two-sample test of that one cell ignores the selection.
:func:`selection_adjusted_p` answers: how likely is a best-of-K difference at least this large if no grid point
differed from ``none``? It is a max-statistic permutation test (Westfall & Young, *Resampling-Based Multiple
Testing*, 1993, the single-step maxT/minP method): with ``Y[c, s]`` the metric of cell ``c`` (``none`` and the K
grid points) at seed ``s``, the statistic is ``M = max_k sign * (mean_s Y[k, s] - mean_s Y[none, s])``; the null
distribution of ``M`` comes from permuting, within each seed, which cell each of its K + 1 values belongs to, all
K comparisons recomputed from the same permutation (so their dependence, through the shared baseline and the
shared seeds, is kept).

Exchangeability: under the complete null H0 (every grid point trains and evaluates like ``none``) the K + 1 runs
of one seed differ only in their cell label; the seed fixes the same data split, initialisation and batch order in
every cell of a (model, dataset) pair, so the vector ``(Y[none, s], Y[1, s], ..., Y[K, s])`` is exchangeable, and
seeds are independent. Permuting labels within seeds therefore leaves the joint null distribution unchanged, which
makes the test exact (level alpha for every alpha) whether or not the cells are correlated through their seeds.
Seeds missing from some cell are left out (a permutation needs the full vector). The resampling is
:func:`scipy.stats.permutation_test` (``permutation_type="samples"``), exact when the ``((K + 1)!)^n``
permutations number at most ``resamples``, else ``resamples`` random ones from a fixed generator.

:func:`chance_gain` estimates the across-dataset gain that picking the best of K grid points on the test mean of n
seeds shows when no grid point differs from the baseline, from a study's own seed-to-seed spread.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from scipy import stats

RESAMPLES = 9999
SEED = 0


def _max_difference(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    base = np.mean(samples[0], axis=axis)
    return np.max(np.stack([np.mean(s, axis=axis) - base for s in samples[1:]]), axis=0)


def selection_adjusted_p(baseline: Mapping[int, float], grid: Mapping[str, Mapping[int, float]], *,
                         higher_is_better: bool = True, resamples: int = RESAMPLES, seed: int = SEED) -> float:
    """Permutation p-value of the best-of-K difference from the baseline (module docstring).

    ``baseline`` maps seed -> metric of ``none``; ``grid`` maps each of the K grid labels to its seed -> metric.
    Only seeds present in every cell count; NaN when fewer than 2 remain or K = 0. The p-value is the share of
    permutations whose maximum difference reaches the observed one (exact), or ``(1 + hits) / (1 + resamples)``
    when permutations are sampled."""
    seeds = sorted(set(baseline).intersection(*(set(g) for g in grid.values()))) if grid else []
    if len(seeds) < 2:
        return math.nan
    sign = 1.0 if higher_is_better else -1.0
    samples = [sign * np.array([baseline[s] for s in seeds], float)]
    samples += [sign * np.array([values[s] for s in seeds], float) for values in grid.values()]
    result = stats.permutation_test(samples, _max_difference, permutation_type="samples", vectorized=True,
                                    n_resamples=resamples, alternative="greater", rng=np.random.default_rng(seed))
    return float(result.pvalue)


def chance_gain(residuals: np.ndarray, k: int, n: int, *, draws: int = 4000, seed: int = SEED) -> float:
    """Expected gain of the best of ``k`` grid means over one baseline mean, each of ``n`` seeds, when every cell
    has the seed-to-seed spread of ``residuals`` (per-seed deviations from their cell's mean, sign-adjusted so
    that larger is better, scaled by ``sqrt(n_c / (n_c - 1))`` so that their variance estimates the cells'):
    ``E[max_k mean(R_k) - mean(R_0)]`` with every ``R`` drawn with replacement from ``residuals`` (a bootstrap
    of ``draws`` repetitions from a fixed generator). For normal spread sigma it approaches
    ``E[max of k standard normals] * sigma / sqrt(n)`` (1.87 sigma / sqrt(5) for the paper's k = 20, n = 5). It
    treats the grid cells as independent; cells that share seeds are positively correlated, so this is an
    upper bound on the selection bias. NaN without residuals."""
    residuals = np.asarray(residuals, float)
    residuals = residuals[np.isfinite(residuals)]
    if residuals.size < 2:
        return math.nan
    rng = np.random.default_rng(seed)
    means = rng.choice(residuals, size=(draws, k + 1, n), replace=True).mean(axis=2)
    return float(np.mean(means[:, 1:].max(axis=1) - means[:, 0]))
