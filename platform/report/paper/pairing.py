"""Per-set tests of the proposed cell against the baseline, paired where seeds pair the cells.

Under the paper protocol each seed fixes the data split and the initialisation in every cell
(``datasets/protocol.py``), so the arms of a set are paired by seed. Per (model, set), from the arms' values
``a`` (proposed) and ``b`` (baseline) over their seeds:

- ``difference = mean(a) - mean(b)``; ``r`` the Pearson correlation of ``a`` and ``b`` over the shared seeds
  (NaN where an arm has no spread);
- ``p_paired``: ``scipy.stats.ttest_rel`` of ``a - b`` over the shared seeds (df = pairs - 1), computed only where
  both arms hold the same seeds; ``p_unpaired``: the paper's Student t (``scipy.stats.ttest_ind``, pooled);
  ``p_test``: the report's ``--test``; a set whose arms (paired: whose differences) are all equal has no test
  (NaN); each with Holm over the finite p-values of the table;
- ``se_within``: the sampling SE of ``difference`` under the design (``sd(a - b) / sqrt(pairs)`` paired, else
  ``sqrt(s_a^2 / n_a + s_b^2 / n_b)``); ``mde_paired`` / ``mde_unpaired``: the per-set gain each test detects with
  power 0.8 (:func:`~ndebench.platform.report.statistics.power.per_set_mde`).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import agreement as agr
from ndebench.platform.report.statistics import power as pw
from ndebench.platform.report.statistics import stats
from ndebench.platform.report.statistics.rows import row_names

SET_COLUMNS = ["model", "dataset", "paired", "n", "difference", "r", "se_within", "p_paired", "p_paired_holm",
               "p_unpaired", "p_unpaired_holm", "p_test", "p_test_holm", "mde_paired", "mde_unpaired"]


def _arm(ok: pd.DataFrame, regularizer: str, metric: str) -> pd.Series:
    arm = ok[row_names(ok) == regularizer].dropna(subset=[metric])
    sign = 1.0 if stats.higher_is_better(metric) else -1.0
    return (sign * arm.set_index(arm["seed"].astype(int))[metric].astype(float)).sort_index()


def _set_row(a: pd.Series, b: pd.Series, test: str) -> dict[str, Any]:
    paired = len(a) >= 2 and list(a.index) == list(b.index)
    both = a.index.intersection(b.index)
    spread = len(both) >= 2 and np.std(a[both]) > 0 and np.std(b[both]) > 0
    r = float(np.corrcoef(a[both], b[both])[0, 1]) if spread else math.nan
    diff = (a[both] - b[both]).to_numpy()
    sd_d = float(np.std(diff, ddof=1)) if len(diff) >= 2 else math.nan
    sd_pooled = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2) if min(len(a), len(b)) >= 2 else math.nan
    se_within = (sd_d / math.sqrt(len(diff)) if paired
                 else math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if min(len(a), len(b)) >= 2
                 else math.nan)

    def p(kind: str) -> float:
        if kind == "paired" and not paired:
            return math.nan
        result = stats.two_sample_test(a.to_numpy(), b.to_numpy(), kind, a.index.to_numpy(), b.index.to_numpy())
        return math.nan if result.flag == stats.IDENTICAL else result.p

    return {"paired": paired, "n": len(both), "difference": float(a.mean() - b.mean()), "r": r,
            "se_within": se_within, "p_paired": p("paired"), "p_unpaired": p("student"), "p_test": p(test),
            "mde_paired": pw.per_set_mde(sd_d, sd_pooled, "paired", len(diff)) if paired else math.nan,
            "mde_unpaired": pw.per_set_mde(sd_d, sd_pooled, "student", min(len(a), len(b)))}


def set_tests(runs: pd.DataFrame, primary: dict[str, str], sets: list[tuple[str, str]], proposed: str,
              baseline: str, test: str) -> pd.DataFrame:
    """Per (model, dataset) of ``sets``: the columns :data:`SET_COLUMNS` (module docstring); the sign of a
    difference is 'larger is better' whatever the metric."""
    ok = runs[runs["status"] == "ok"]
    rows = []
    for model, dataset in sets:
        here = ok[(ok["model"] == model) & (ok["dataset"] == dataset)]
        a, b = _arm(here, proposed, primary[dataset]), _arm(here, baseline, primary[dataset])
        rows.append({"model": model, "dataset": dataset, **_set_row(a, b, test)})
    frame = pd.DataFrame(rows, columns=[c for c in SET_COLUMNS if not c.endswith("_holm")])
    for column in ("p_paired", "p_unpaired", "p_test"):
        frame[f"{column}_holm"] = agr.holm(frame[column].to_numpy(float)) if len(frame) else []
    return frame[SET_COLUMNS]


def seeds_pair(tests: pd.DataFrame) -> bool:
    """Whether every set's arms hold the same seeds (the paper protocol)."""
    return bool(len(tests)) and bool(tests["paired"].all())


def median_correlation(tests: pd.DataFrame) -> float:
    """The median over the sets with spread in both arms of the arms' correlation over seeds; 0 where the seeds
    do not pair the cells or no set has spread."""
    finite = tests["r"].dropna() if seeds_pair(tests) else pd.Series(dtype=float)
    return float(np.clip(finite.median(), -0.99, 0.99)) if len(finite) else 0.0


def within_se(tests: pd.DataFrame, model: str, datasets: list[str]) -> float:
    """The sampling SE of the mean of ``model``'s set differences over ``datasets`` from seed noise alone:
    ``sqrt(sum_j se_within_j^2) / k``."""
    rows = tests[(tests["model"] == model) & tests["dataset"].isin(datasets)]
    if rows.empty or rows["se_within"].isna().any():
        return math.nan
    return float(math.sqrt((rows["se_within"] ** 2).sum()) / len(rows))


def set_section(tests: pd.DataFrame, test: str) -> Section:
    """The per-set tests (:func:`set_tests`) as a report section: the paired test beside the paper's unpaired
    one, with Holm over each column's testable sets."""
    rows = [[Cell(t.model), Cell(t.dataset), Cell(_signed(t.difference)), Cell(_f(t.r, ".2f")),
             Cell(f"{_f(t.p_paired, '.3g')} ({_f(t.p_paired_holm, '.3g')})",
                  flag=bool(t.p_paired_holm < agr.ALPHA)),
             Cell(f"{_f(t.p_unpaired, '.3g')} ({_f(t.p_unpaired_holm, '.3g')})",
                  flag=bool(t.p_unpaired_holm < agr.ALPHA)),
             Cell(_f(t.mde_paired, ".3f")), Cell(_f(t.mde_unpaired, ".3f"))] for t in tests.itertuples(index=False)]
    paired = seeds_pair(tests)
    return Section(
        "Per-set tests, paired by seed",
        ["model", "dataset", "continuum_dropout - none", "r over seeds", "paired t: p (Holm)",
         "Student t (the paper's): p (Holm)", "MDE paired", "MDE Student"], rows,
        "Per set, the validation-selected continuum_dropout against none over the seeds: the paired t-test "
        "(scipy ttest_rel on the seed-wise differences; each seed fixes the split and the initialisation in every "
        "cell) beside the paper's unpaired Student t (ttest_ind), Holm over each column's testable sets (a set "
        "whose arms, or differences, are all equal has no test); r: the arms' correlation over seeds; MDE: the "
        "per-set gain each test detects with 80% power at alpha 0.05 (statsmodels TTestPower, TTestIndPower).",
        notes=[(f"Seeds pair every set's cells; median r = {median_correlation(tests):.2f} over the sets with spread "
                "in both arms: the paired test is the design's, the Student t the paper's."
                if paired else "The seeds do not pair the cells: the paired test is not computed."),
               f"The report's --test is {test}: the per-set counts of the power table use it."],
        flag_legend="p < 0.05 after Holm")


def _f(x: float, fmt: str) -> str:
    return "–" if not math.isfinite(x) else format(x, fmt)


def _signed(x: float) -> str:
    """``+0.000`` for a difference within float noise of 0 (identical means), not ``-0.000``."""
    return f"{0.0 if abs(x) < 5e-13 else x:+.3f}"
