"""The Bayesian signed-rank test of two methods over datasets (Benavoli, Corani, Demšar and Zaffalon, "Time for a
change: a tutorial for comparing multiple classifiers through Bayesian analysis", JMLR 18, 2017), by ``baycomp``.

With per-dataset scores ``x_d`` and ``y_d`` (higher is better) and differences ``z_d = x_d - y_d``, the test puts a
Dirichlet process (prior strength 0.5 on a pseudo-observation at 0) on the distribution of ``z`` and samples the
posterior of the probabilities that ``z`` lies left of, inside and right of the region of practical equivalence
``[-rope, rope]`` (on the Walsh averages ``(z_i + z_j) / 2``, as the signed-rank statistic does). A probability
above :data:`DECISION` is a decision; below it the data do not decide.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The tutorial's threshold: a posterior probability above 0.95 is read as a decision.
DECISION = 0.95
# Posterior samples and the seed of baycomp's sampler: the probabilities are Monte Carlo estimates, with a standard
# error of at most 0.5 / sqrt(NSAMPLES) = 0.0022; a fixed seed makes a report reproduce to the last digit.
NSAMPLES = 50_000
SEED = 0


@dataclass(frozen=True)
class BayesResult:
    """``better``: P(x better than y by more than ``rope``), ``equivalent``: P(within ``rope``), ``worse``:
    P(y better by more than ``rope``); ``n`` datasets; ``decision`` in words (:func:`decision`)."""

    n: int
    rope: float
    better: float
    equivalent: float
    worse: float

    @property
    def decision(self) -> str:
        return decision(self.better, self.equivalent, self.worse)


def decision(better: float, equivalent: float, worse: float) -> str:
    """``"better"``, ``"equivalent"`` or ``"worse"`` where that posterior probability exceeds :data:`DECISION`,
    else ``"no decision"``."""
    for name, p in (("better", better), ("equivalent", equivalent), ("worse", worse)):
        if p > DECISION:
            return name
    return "no decision"


def signed_rank(x: np.ndarray, y: np.ndarray, rope: float) -> BayesResult:
    """The Bayesian signed-rank test of scores ``x`` against ``y`` (shape ``(n_datasets,)`` each, higher is better)
    with the region of practical equivalence ``[-rope, rope]`` (``baycomp.SignedRankTest.probs``, prior 0.5,
    :data:`NSAMPLES` posterior samples, seed :data:`SEED`). NaN probabilities for fewer than 2 datasets."""
    from baycomp import SignedRankTest

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2:
        return BayesResult(len(x), rope, math.nan, math.nan, math.nan)
    # baycomp works on y - x: its left probability is x better by more than rope, its right y better.
    left, middle, right = SignedRankTest.probs(x, y, rope=rope, nsamples=NSAMPLES, random_state=SEED)
    return BayesResult(len(x), rope, float(left), float(middle), float(right))
