"""What a study needs to decide, and the across-dataset rows without the sets near ceiling.

- **Without ceiling sets**: per row of :func:`~ndebench.platform.report.paper.comparison.compare_summary`, the
  study's improvement recomputed over its sets not near ceiling (mean and SE over sets of the per-set
  differences of :func:`~ndebench.platform.report.paper.pairing.set_tests`), for
  :func:`~ndebench.platform.report.paper.agreement.across_agreement` to compare with the paper as before.
- **Sets needed** (:mod:`~ndebench.platform.report.statistics.power`): per row, the sets a study of the same design
  (its seeds per set, paired differences) needs to tell the paper's improvement from 0 and to tell it from the
  study's own estimate with 80% power, with the spread of per-set gains observed in the study (seed noise
  included) and, as the other bracket, the paper's own (its SE x sqrt(its sets)).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import power as pw
from scipy import stats as sps

NEEDS_COLUMNS = ["model", "split", "study_n_datasets", "paper_improvement", "study_improvement", "study_spread",
                 "paper_spread", "sets_from_zero_study", "sets_from_zero_paper", "sets_from_study_study",
                 "sets_from_study_paper"]


def without_ceiling(across: pd.DataFrame, tests: pd.DataFrame, powers: pd.DataFrame) -> pd.DataFrame:
    """``across`` with its study columns over each row's sets not near ceiling (``ceiling_sets`` of ``powers``)."""
    ceilings = {(p.model, p.split): set(p.ceiling_sets) for p in powers.itertuples(index=False)}
    diffs = tests.set_index(["model", "dataset"])["difference"]
    rows = []
    for r in across.itertuples(index=False):
        free = [d for d in r.study_datasets if d not in ceilings.get((r.model, r.split), set())]
        gains = np.array([diffs[(r.model, d)] for d in free], dtype=float)
        rows.append(r._asdict() | {
            "study_datasets": free, "study_n_datasets": len(free),
            "study_improvement": float(gains.mean()) if len(gains) else math.nan,
            "study_se": float(sps.sem(gains)) if len(gains) > 1 else math.nan})
    return pd.DataFrame(rows, columns=across.columns)


def sets_needed(agree: pd.DataFrame) -> pd.DataFrame:
    """Per row of :func:`~ndebench.platform.report.paper.agreement.across_agreement`: the columns
    :data:`NEEDS_COLUMNS` (module docstring); the study's spread is NaN where its SE counts as missing."""
    rows = []
    for r in agree.itertuples(index=False):
        study = r.study_se * math.sqrt(r.study_n_datasets)
        se_p = r.paper_se
        paper = se_p * math.sqrt(r.paper_df + 1)
        gap = r.paper_improvement - r.study_improvement
        rows.append({"model": r.model, "split": r.split, "study_n_datasets": r.study_n_datasets,
                     "paper_improvement": r.paper_improvement, "study_improvement": r.study_improvement,
                     "study_spread": study, "paper_spread": paper,
                     "sets_from_zero_study": pw.sets_to_detect(r.paper_improvement, study),
                     "sets_from_zero_paper": pw.sets_to_detect(r.paper_improvement, paper),
                     "sets_from_study_study": pw.sets_to_distinguish(gap, study, se_p, r.paper_df),
                     "sets_from_study_paper": pw.sets_to_distinguish(gap, paper, se_p, r.paper_df)})
    return pd.DataFrame(rows, columns=NEEDS_COLUMNS)


def _k(x: float) -> str:
    return "–" if math.isnan(x) else "never" if math.isinf(x) else str(int(x))


def needs_section(needs: pd.DataFrame, seeds: int) -> Section:
    """:func:`sets_needed` as a report section."""
    rows = [[Cell(n.model), Cell(n.split), Cell(str(n.study_n_datasets)),
             Cell(f"{n.paper_improvement:+.3f} / {n.study_improvement:+.3f}"),
             Cell(f"{_k(n.sets_from_zero_study)} / {_k(n.sets_from_zero_paper)}"),
             Cell(f"{_k(n.sets_from_study_study)} / {_k(n.sets_from_study_paper)}")]
            for n in needs.itertuples(index=False)]
    return Section(
        "Sets a study needs to decide",
        ["model", "split", "study sets", "paper / study improvement",
         "sets to tell the paper's gain from 0 (study / paper spread)",
         "sets to tell the paper from the study's estimate (study / paper spread)"], rows,
        f"Sets (of {seeds} seeds each, the study's design) for 80% power at alpha 0.05: to tell the paper's mean "
        "gain from 0, a one-sample t over sets (statsmodels TTestPower); to tell the paper's mean from the study's, "
        "the Welch test of study minus paper with the paper's SE. Spread: the std of the per-set gains, seed noise "
        "included, observed in the study (– where its SE counts as missing) or the paper's (its SE x sqrt(sets)). "
        "'never': the paper's own SE caps the power below 80% at any number of sets.",
        notes=["More seeds shrink only the seed-noise part of the spread; the between-set part needs sets."],
        flag_legend="")
