"""The paper's claims about its Table 2 (Neural ODE, eight regularization methods on four UEA sets) checked against a
study's many-method comparison, each under a stated rule.

1. "Continuum Dropout consistently demonstrates superior performance over existing regularization methods": for each
   baseline, the Bayesian signed-rank decision over the study's sets
   (:mod:`~ndebench.platform.report.statistics.bayes`).
   The claim **holds** when Continuum Dropout is decided better than every baseline; it **fails** when it is decided
   equivalent to or worse than some baseline; else it is **inconclusive**.
2. The paper's ranking of the methods: the average ranks of Table 2 (over its four sets) against the study's average
   ranks, by Kendall's tau over the methods both have (``scipy.stats.kendalltau``). The ranking **agrees** when tau > 0
   with p < alpha, is **reversed** when tau < 0 with p < alpha, else **inconclusive**.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from ndebench.platform.report.methods.comparison import FOCUS, ModelComparison
from ndebench.platform.report.paper.data import paper_cells
from scipy.stats import kendalltau

TABLE = 2


@dataclass(frozen=True)
class Claim:
    """One claim: what the paper says, what the study found, the rule and the ``verdict``."""

    claim: str
    paper: str
    study: str
    rule: str
    verdict: str


def paper_ranks() -> pd.Series:
    """The average rank (1 = best, ties averaged) of each method of the paper's Table 2 over its sets."""
    cells = paper_cells()
    cells = cells[(cells["table"] == TABLE) & (cells["setting"] == "")]
    means = cells.pivot(index="regularizer", columns="dataset", values="mean").astype(float)
    return means.rank(ascending=False).mean(axis=1).sort_values()


def superiority(c: ModelComparison) -> Claim | None:
    """Claim 1 over the baselines the study compared with Continuum Dropout; None without Continuum Dropout."""
    if not c.bayes:
        return None
    decisions = {other: r.decision for other, r in c.bayes.items()}
    contradicted = sorted(o for o, d in decisions.items() if d in ("equivalent", "worse"))
    undecided = sorted(o for o, d in decisions.items() if d == "no decision")
    verdict = "fails" if contradicted else "inconclusive" if undecided else "holds"
    better = sorted(o for o, d in decisions.items() if d == "better")
    found = (f"decided better than {len(better)} of {len(decisions)} ({', '.join(better) or 'no method'})"
             + (f"; equivalent or worse than {', '.join(contradicted)}" if contradicted else "")
             + (f"; no decision against {', '.join(undecided)}" if undecided else ""))
    return Claim(f"{FOCUS} is better than every baseline", "best mean on all 4 sets of Table 2", found,
                 "Bayesian signed-rank over the sets: P(better) > 0.95 against every baseline holds; P(equivalent) "
                 "or P(worse) > 0.95 against one fails; else inconclusive", verdict)


def ranking(c: ModelComparison, alpha: float) -> Claim | None:
    """Claim 2 over the methods both the paper's Table 2 and the study rank; None with fewer than 3 such methods."""
    paper = paper_ranks()
    common = [m for m in c.ranks.index if m in paper.index]
    if len(common) < 3:
        return None
    result = kendalltau(paper[common].to_numpy(), c.ranks[common].to_numpy())
    tau, p = float(result.statistic), float(result.pvalue)
    verdict = ("agrees" if tau > 0 else "reversed") if p < alpha else "inconclusive"
    order = " > ".join(paper[common].sort_values().index)
    return Claim(f"the paper's ranking of the {len(common)} methods", f"average ranks over Table 2's sets: {order}",
                 f"Kendall's tau = {tau:+.3f} (p = {p:.4g}) between the paper's and the study's average ranks",
                 f"Kendall's tau (scipy.stats.kendalltau): tau > 0 with p < {alpha:g} agrees, tau < 0 with p < "
                 f"{alpha:g} reversed, else inconclusive", verdict)


def table2_claims(c: ModelComparison, alpha: float) -> list[Claim]:
    """The claims of the paper's Table 2 that ``c`` can check."""
    return [claim for claim in (superiority(c), ranking(c, alpha)) if claim is not None]
