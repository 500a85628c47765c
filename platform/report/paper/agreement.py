"""Agreement of the study with the paper's values, not only with 0 (``ndebench report --paper``).

From the frames of :mod:`~ndebench.platform.report.paper.comparison` and the rule of
:mod:`~ndebench.platform.report.statistics.agreement`:

- **Across datasets** (Tables 9-11): the study's improvement with its 95% interval on ``sets - 1`` degrees of
  freedom, the paper's with its own (its SE over its 15 or 30 sets, ``df = sets - 1``), the Welch interval of
  study minus paper, the TOST with margin :data:`MARGIN_FRACTION` x the paper's improvement, the study's minimum
  detectable effect (MDE, its own test against 0) and its power at the paper's effect, the verdict, and how many
  of the row's sets are near ceiling (below), which can make a row differ by its sets rather than the method.
- **Per cell**: study cell minus paper cell with the paper's std and n = 5 seeds, the TOST with margin
  :data:`MARGIN_FRACTION` x the paper's Table 9 improvement of the model (the mean of Table 9's rows for a model
  it lacks), the MDE of the Welch test, and the verdict.
- **Per-set power**: per model and split, the paper's effect in per-seed standard deviations,
  ``d = improvement / sqrt((baseline_std^2 + proposed_std^2) / 2)`` (Tables 9-11), the power of the study's
  per-set test at that d (Student's two-sample t, 5 seeds per side: ``statsmodels`` ``TTestIndPower``), the
  count of the study's sets where the validation-selected Continuum Dropout is significantly better than
  ``none`` (p < 0.05, as ``table.md``), the count expected if the paper's d held (power x sets), and the sets
  near ceiling: ``1 - baseline mean < the paper's improvement``, where the paper's gain cannot show in full.

Margin: half the paper's improvement. A study within it of the paper has the paper's sign and at least half its
size, so it reproduces the claim; a difference of half the claimed gain or more changes what the claim says.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd
from ndebench.platform.report.paper.data import PAPER_SEEDS, paper_summary
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import agreement as agr
from ndebench.platform.report.statistics import stats
from scipy import stats as sps
from statsmodels.stats.power import TTestIndPower

MARGIN_FRACTION = 0.5
ACROSS_COLUMNS = ["model", "split", "table", "study_n_datasets", "study_improvement", "study_df", "study_ci_low",
                  "study_ci_high", "paper_improvement", "paper_df", "paper_ci_low", "paper_ci_high", "difference",
                  "diff_df", "diff_ci_low", "diff_ci_high", "p_difference", "p_difference_holm", "margin", "p_tost",
                  "p_tost_holm", "study_mde", "power_at_paper", "verdict"]
CELL_COLUMNS = ["table", "model", "dataset", "regularizer", "metric", "study_mean", "paper_mean", "difference",
                "diff_df", "diff_ci_low", "diff_ci_high", "p_difference", "p_difference_holm", "margin", "p_tost",
                "p_tost_holm", "mde", "verdict"]
POWER_COLUMNS = ["model", "split", "paper_d", "power", "study_sets", "study_significant", "expected_significant",
                 "ceiling_sets", "significant_sets", "sets"]
MARGIN_TEXT = (f"TOST margin: {MARGIN_FRACTION:g} x the paper's improvement (across datasets: the row's; per cell: "
               "the model's Table 9 improvement): a study within it of the paper keeps the claim's sign and at least "
               "half its size; a difference of half the claimed gain or more changes what the claim says.")


def _with_verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return frame
    frame["p_difference_holm"] = agr.holm(frame["p_difference"].to_numpy(float))
    frame["p_tost_holm"] = agr.holm(frame["p_tost"].to_numpy(float))
    frame["verdict"] = [agr.verdict(d, e) for d, e in zip(frame["p_difference_holm"], frame["p_tost_holm"],
                                                          strict=True)]
    return frame


def across_agreement(across: pd.DataFrame) -> pd.DataFrame:
    """Per row of :func:`~ndebench.platform.report.paper.comparison.compare_summary`: both intervals, the Welch
    difference, the TOST, the study's MDE and power at the paper's effect, and the verdict (columns
    :data:`ACROSS_COLUMNS`)."""
    rows = []
    for r in across.itertuples(index=False):
        study_df, paper_df = r.study_n_datasets - 1, r.paper_n_datasets - 1
        low, high = agr.t_interval(r.study_improvement, r.study_se, study_df)
        p_low, p_high = agr.t_interval(r.paper_improvement, r.paper_improvement_se, paper_df)
        diff = agr.welch(r.study_improvement, r.study_se, study_df, r.paper_improvement, r.paper_improvement_se,
                         paper_df)
        margin = MARGIN_FRACTION * abs(r.paper_improvement)
        rows.append({"model": r.model, "split": r.split, "table": r.table, "study_n_datasets": r.study_n_datasets,
                     "study_improvement": r.study_improvement, "study_df": study_df, "study_ci_low": low,
                     "study_ci_high": high, "paper_improvement": r.paper_improvement, "paper_df": paper_df,
                     "paper_ci_low": p_low, "paper_ci_high": p_high, "difference": diff["difference"],
                     "diff_df": diff["df"], "diff_ci_low": diff["ci_low"], "diff_ci_high": diff["ci_high"],
                     "p_difference": diff["p"], "margin": margin,
                     "p_tost": agr.tost(diff["difference"], diff["se"], diff["df"], margin),
                     "study_mde": agr.mde(r.study_se, study_df),
                     "power_at_paper": agr.power(r.paper_improvement, r.study_se, study_df)})
    return _with_verdicts(pd.DataFrame(rows, columns=ACROSS_COLUMNS))


def cell_margin(model: str) -> float:
    """:data:`MARGIN_FRACTION` x the paper's Table 9 improvement of ``model`` (the mean over Table 9's models for a
    model it has no row for)."""
    table9 = paper_summary().query("split == 'all'").set_index("model")["improvement"]
    return MARGIN_FRACTION * abs(float(table9.get(model, table9.mean())))


def cell_agreement(cells: pd.DataFrame) -> pd.DataFrame:
    """Per row of :func:`~ndebench.platform.report.paper.comparison.compare_cells`: the Welch difference of the
    study cell and the paper cell (the paper's std and n), the TOST, the MDE and the verdict (columns
    :data:`CELL_COLUMNS`)."""
    rows = []
    for c in cells.itertuples(index=False):
        se_s = c.study_std / math.sqrt(c.study_n) if c.study_n > 1 else math.nan
        diff = agr.welch(c.study_mean, se_s, c.study_n - 1, c.paper_mean, c.paper_std / math.sqrt(c.paper_n),
                         c.paper_n - 1)
        margin = cell_margin(c.model)
        rows.append({"table": c.table, "model": c.model, "dataset": c.dataset, "regularizer": c.regularizer,
                     "metric": c.metric, "study_mean": c.study_mean, "paper_mean": c.paper_mean,
                     "difference": diff["difference"], "diff_df": diff["df"], "diff_ci_low": diff["ci_low"],
                     "diff_ci_high": diff["ci_high"], "p_difference": diff["p"], "margin": margin,
                     "p_tost": agr.tost(diff["difference"], diff["se"], diff["df"], margin),
                     "mde": agr.mde(diff["se"], diff["df"])})
    return _with_verdicts(pd.DataFrame(rows, columns=CELL_COLUMNS))


def _significant_better(runs: pd.DataFrame, metric: str, model: str, dataset: str, proposed: str,
                        baseline: str) -> bool:
    ok = runs[(runs["status"] == "ok") & (runs["model"] == model) & (runs["dataset"] == dataset)]
    a = ok[ok["regularizer"] == proposed][metric].astype(float).dropna().to_numpy()
    b = ok[ok["regularizer"] == baseline][metric].astype(float).dropna().to_numpy()
    better = (a.mean() - b.mean()) * (1 if stats.higher_is_better(metric) else -1) > 0 if len(a) and len(b) else False
    return bool(stats.two_sample_test(a, b).p < agr.ALPHA and better)


def per_set_power(runs: pd.DataFrame, primary: dict[str, str], across: pd.DataFrame, proposed: str,
                  baseline: str) -> pd.DataFrame:
    """Per row of ``across``: the paper's per-set effect size, the power of a per-set test at it, and the observed
    and expected counts of significant sets (module docstring; columns :data:`POWER_COLUMNS`)."""
    paper = paper_summary().set_index(["split", "model"])
    rows = []
    for r in across.itertuples(index=False):
        ref = paper.loc[(r.split, r.model)]
        d = float(ref["improvement"]) / math.sqrt((ref["baseline_std"] ** 2 + ref["proposed_std"] ** 2) / 2)
        power = float(TTestIndPower().power(d, nobs1=PAPER_SEEDS, alpha=agr.ALPHA, ratio=1.0))
        hits = [ds for ds in r.study_datasets if _significant_better(runs, primary[ds], r.model, ds, proposed,
                                                                     baseline)]
        ok = runs[(runs["status"] == "ok") & (runs["model"] == r.model) & (runs["regularizer"] == baseline)]
        ceiling = [ds for ds in r.study_datasets
                   if 1 - ok[ok["dataset"] == ds][primary[ds]].astype(float).mean() < float(ref["improvement"])]
        rows.append({"model": r.model, "split": r.split, "paper_d": d, "power": power,
                     "study_sets": r.study_n_datasets, "study_significant": len(hits), "significant_sets": hits,
                     "sets": list(r.study_datasets),
                     "expected_significant": power * r.study_n_datasets, "ceiling_sets": ceiling})
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def _ci(low: float, high: float) -> str:
    return "–" if not math.isfinite(low) else f"[{low:+.3f}, {high:+.3f}]"


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.3g}"


def _num(x: float, fmt: str = "+.3f") -> str:
    return "–" if not math.isfinite(x) else format(x, fmt)


def _count_note(rows: pd.DataFrame) -> str:
    """The univariate and multivariate rows' significant sets against the count the paper's effects give, and the
    chance of so few (:func:`~ndebench.platform.report.statistics.agreement.at_most`), over all their sets and over
    those not near ceiling."""
    if rows.empty:
        return ""
    sets = [(r.power, d in r.significant_sets, d in r.ceiling_sets) for r in rows.itertuples(index=False)
            for d in r.sets]
    hits = sum(hit for _, hit, _ in sets)
    free = [(q, hit) for q, hit, ceiling in sets if not ceiling]
    free_hits = sum(hit for _, hit in free)
    return (f"Over the univariate and multivariate rows: {hits} of {len(sets)} sets significant; expected if the "
            f"paper's effects held: {sum(q for q, _, _ in sets):.2f}; power per set {rows['power'].min():.2f}-"
            f"{rows['power'].max():.2f}; chance of at most {hits} if they held (Poisson binomial over the sets' "
            f"powers): {agr.at_most(hits, [q for q, _, _ in sets]):.3f}; over the {len(free)} sets not near "
            f"ceiling, where the paper's gain can show in full: {free_hits} significant, chance of at most "
            f"{free_hits}: {agr.at_most(free_hits, [q for q, _ in free]):.3f}. Read as 'differs' from the paper "
            f"when that last chance is below {agr.ALPHA:g}, else 'inconclusive'.")


def _study_text(r: Any) -> str:
    if r.study_n_datasets < 1:
        return "no set"
    if r.study_df < 1:
        return f"{_num(r.study_improvement)} (1 set: no interval)"
    return f"{_num(r.study_improvement)} {_ci(r.study_ci_low, r.study_ci_high)} df={r.study_df}"


def with_ceilings(across: pd.DataFrame, powers: pd.DataFrame) -> pd.DataFrame:
    """``across`` (:func:`across_agreement`) with ``ceiling_sets``: the row's study sets near ceiling, from the
    same (model, split) row of :func:`per_set_power`."""
    ceilings = {(p.model, p.split): list(p.ceiling_sets) for p in powers.itertuples(index=False)}
    return across.assign(ceiling_sets=[ceilings.get((r.model, r.split), []) for r in across.itertuples(index=False)])


def _ceiling_note(across: pd.DataFrame) -> str:
    """The rows that differ from the paper while half or more of their study sets are near ceiling."""
    rows = [f"{r.model} {r.split} ({len(r.ceiling_sets)} of {r.study_n_datasets})"
            for r in across.itertuples(index=False)
            if r.verdict == "differs" and 2 * len(r.ceiling_sets) >= r.study_n_datasets]
    return ("Near ceiling: the study's sets whose none mean leaves less room to 1 than the paper's improvement "
            "(per-set power table). A row that differs with half or more of its sets near ceiling may differ by "
            "the sets' ceiling, not the method: there the study's improvement cannot reach the paper's. "
            + (f"Such rows: {', '.join(rows)}." if rows else "No row that differs is such a row."))


def agreement_sections(across: pd.DataFrame, cells: pd.DataFrame, powers: pd.DataFrame) -> list[Section]:
    """The across-dataset agreement (``across`` from :func:`with_ceilings`), the per-cell agreement and the
    per-set power as report sections."""
    across_rows = [[Cell(r.model), Cell(f"{r.split} (Table {r.table})"),
                    Cell(_study_text(r)),
                    Cell(f"{_num(r.paper_improvement)} {_ci(r.paper_ci_low, r.paper_ci_high)} df={r.paper_df}"),
                    Cell(f"{_num(r.difference)} {_ci(r.diff_ci_low, r.diff_ci_high)}"),
                    Cell(f"{_p(r.p_difference)} ({_p(r.p_difference_holm)})"),
                    Cell(f"±{r.margin:.3f}: {_p(r.p_tost)} ({_p(r.p_tost_holm)})"),
                    Cell(_num(r.study_mde, ".3f")), Cell(_num(r.power_at_paper, ".2f")),
                    Cell(f"{len(r.ceiling_sets)} of {r.study_n_datasets}"),
                    Cell(r.verdict, flag=r.verdict == "differs")]
                   for r in across.itertuples(index=False)]
    counts = across["verdict"].value_counts().to_dict() if len(across) else {}
    quantiles = ", ".join(f"t(0.975, df = {df}) = {sps.t.ppf(0.975, df):.3f}"
                          for df in sorted({int(d) for d in across["study_df"] if d >= 1}))
    first = Section(
        "Agreement with the paper across datasets",
        ["model", "split", "study improvement [95% CI]", "paper improvement [95% CI]", "study - paper [95% CI]",
         "p (Holm)", "TOST margin: p (Holm)", "study MDE", "power at paper", "near ceiling", "verdict"], across_rows,
        "Improvement of continuum_dropout over none, mean over sets with its Student-t 95% interval on sets - 1 "
        "degrees of freedom, for the study and for the paper (its SE over its sets); study - paper: Welch interval "
        "and p (Welch-Satterthwaite df); TOST: equivalence within the margin; study MDE: the smallest improvement "
        "the study's own test against 0 detects with 80% power at alpha 0.05; power at paper: that test's power if "
        "the paper's improvement were true.",
        notes=[agr.RULE, MARGIN_TEXT, "Verdicts: " + ", ".join(f"{v} {counts.get(v, 0)} of {len(across)}"
                                                              for v in agr.VERDICTS), _ceiling_note(across)]
        + ([f"The study's intervals use t quantiles {quantiles}: with few sets the interval is that many standard "
            "errors wide on each side."] if quantiles else []),
        flag_legend="differs from the paper")
    cell_rows = [[Cell(str(c.table)), Cell(c.model), Cell(c.dataset), Cell(c.regularizer),
                  Cell(f"{c.study_mean:.3f} vs {c.paper_mean:.3f}"),
                  Cell(f"{_num(c.difference)} {_ci(c.diff_ci_low, c.diff_ci_high)}"),
                  Cell(f"{_p(c.p_difference)} ({_p(c.p_difference_holm)})"),
                  Cell(f"±{c.margin:.3f}: {_p(c.p_tost)} ({_p(c.p_tost_holm)})"), Cell(_num(c.mde, ".3f")),
                  Cell(c.verdict, flag=c.verdict == "differs")] for c in cells.itertuples(index=False)]
    second = Section(
        "Agreement with the paper per cell",
        ["table", "model", "dataset", "regularizer", "study vs paper", "study - paper [95% CI]", "p (Holm)",
         "TOST margin: p (Holm)", "MDE", "verdict"], cell_rows,
        f"Study cell minus paper cell: Welch interval from the study's seeds and the paper's std with n = "
        f"{PAPER_SEEDS}; TOST within the margin; MDE: the smallest difference the Welch test detects with 80% power "
        "at alpha 0.05.",
        notes=([] if cell_rows else ["No study cell has a paper cell (see the first table)."]) + [agr.RULE],
        flag_legend="differs from the paper")
    power_rows = [[Cell(p.model), Cell(p.split), Cell(f"{p.paper_d:.2f}"), Cell(f"{p.power:.2f}"),
                   Cell(f"{p.study_significant} of {p.study_sets}"), Cell(f"{p.expected_significant:.2f}"),
                   Cell(", ".join(p.ceiling_sets) or "–", flag=bool(p.ceiling_sets))]
                  for p in powers.itertuples(index=False)]
    total = _count_note(powers[powers["split"] != "all"])
    d_text = (f"Power of the same test at d = 0.5 and 1: {TTestIndPower().power(0.5, PAPER_SEEDS, agr.ALPHA):.2f} "
              f"and {TTestIndPower().power(1.0, PAPER_SEEDS, agr.ALPHA):.2f}; d for 80% power: "
              f"{TTestIndPower().solve_power(None, nobs1=PAPER_SEEDS, alpha=agr.ALPHA, power=agr.POWER):.2f}.")
    third = Section(
        "Per-set power at the paper's effect",
        ["model", "split", "paper's d", "power per set", "study: significant sets", "expected if the paper holds",
         "near ceiling"],
        power_rows,
        "paper's d: the paper's improvement over its mean per-set seed std (Tables 9-11: sqrt of the mean of "
        f"baseline_std^2 and proposed_std^2); power: a two-sided Student t-test, {PAPER_SEEDS} seeds per side, alpha "
        "0.05 (statsmodels TTestIndPower); significant: validation-selected continuum_dropout better than none with "
        "p < 0.05; expected: power x sets; near ceiling: sets whose baseline mean leaves less room to the maximum (1) "
        "than the paper's improvement, so that the paper's gain cannot show there in full.",
        notes=[n for n in (total, d_text) if n], flag_legend="near ceiling")
    return [first, second, third]


def agreement_json(across: pd.DataFrame, cells: pd.DataFrame, powers: pd.DataFrame) -> dict[str, Any]:
    """``summary.json``'s ``paper_comparison`` keys of this module."""
    return {"agreement_across_datasets": across.to_dict(orient="records"),
            "agreement_cells": cells.to_dict(orient="records"), "per_set_power": powers.to_dict(orient="records"),
            "agreement_rule": {"rule": agr.RULE, "margin": MARGIN_TEXT, "alpha": agr.ALPHA, "power": agr.POWER,
                               "correction": "holm"}}
