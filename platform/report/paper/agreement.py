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
  per-set test at that d (the report's ``--test``, 5 seeds per side, the arms correlated over seeds as the study's
  where seeds pair the cells: :mod:`~ndebench.platform.report.statistics.power`), and with independent arms (the
  paper's unpaired assumption), the count of the study's sets where the validation-selected Continuum Dropout is
  significantly better than ``none`` (that test's p < 0.05), the count expected if the paper's d held (power x
  sets), and the sets near ceiling: ``1 - baseline mean <= the paper's improvement`` (at its printed precision), where
  the paper's gain cannot show in full.
- **Holm families**: the across-dataset rows are corrected together (each ``all`` row the union of its split rows)
  and, beside it, within each of the paper's Tables 9-11; both verdicts are kept, as the family is a choice.

Margin: half the paper's improvement. A study within it of the paper has the paper's sign and at least half its
size, so it reproduces the claim; a difference of half the claimed gain or more changes what the claim says.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import pandas as pd
from ndebench.platform.report.paper import pairing
from ndebench.platform.report.paper.data import PAPER_SEEDS, paper_summary
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import agreement as agr
from ndebench.platform.report.statistics import power as pw
from ndebench.platform.report.statistics.rows import row_names
from scipy import stats as sps

MARGIN_FRACTION = 0.5
ACROSS_COLUMNS = ["model", "split", "table", "study_n_datasets", "study_improvement", "study_df", "study_ci_low",
                  "study_ci_high", "paper_improvement", "paper_df", "paper_ci_low", "paper_ci_high", "difference",
                  "diff_df", "diff_ci_low", "diff_ci_high", "p_difference", "p_difference_holm", "margin", "p_tost",
                  "p_tost_holm", "study_mde", "power_at_paper", "verdict", "study_se", "paper_se", "study_se_missing",
                  "p_difference_holm_table", "verdict_table", "floor_se", "p_difference_floored",
                  "p_difference_holm_floored", "verdict_floored"]
CELL_COLUMNS = ["table", "model", "dataset", "regularizer", "metric", "study_mean", "paper_mean", "difference",
                "diff_df", "diff_ci_low", "diff_ci_high", "p_difference", "p_difference_holm", "margin", "p_tost",
                "p_tost_holm", "mde", "verdict"]
POWER_COLUMNS = ["model", "split", "paper_d", "power", "power_independent", "study_sets", "study_significant",
                 "expected_significant", "ceiling_sets", "significant_sets", "sets", "power_student",
                 "significant_sets_student"]
CEILING = "inconclusive (ceiling)"
CEILING_TOLERANCE = 5e-4
"""Half the last digit of the paper's improvements (3 decimals): room to 1 within it of the gain is no room."""
FAMILY_TEXT = ("Holm family (a choice): the difference tests of all rows of this table with a finite p, each 'all' "
               "row the union of its split rows; 'p (Holm, table)' corrects over the rows of the paper's table "
               "alone (Table 9, 10 or 11).")
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


def _table_family(frame: pd.DataFrame) -> pd.DataFrame:
    frame["p_difference_holm_table"] = frame.groupby("table")["p_difference"].transform(
        lambda p: pd.Series(agr.holm(p.to_numpy(float)), index=p.index)) if len(frame) else []
    tost_table = frame.groupby("table")["p_tost"].transform(
        lambda p: pd.Series(agr.holm(p.to_numpy(float)), index=p.index)) if len(frame) else []
    frame["verdict_table"] = [agr.verdict(d, e) for d, e in zip(frame["p_difference_holm_table"], tost_table,
                                                                strict=True)]
    return frame


def across_agreement(across: pd.DataFrame, within: dict[tuple[str, str], float] | None = None) -> pd.DataFrame:
    """Per row of :func:`~ndebench.platform.report.paper.comparison.compare_summary`: both intervals, the Welch
    difference, the TOST, the study's MDE and power at the paper's effect, and the verdict, under the 9-row Holm
    family and under the row's table alone (columns :data:`ACROSS_COLUMNS`). The study's SE counts as missing
    (``study_se_missing``) at float noise or below ``within[(model, split)]``, the SE its mean has from the sets'
    seed noise alone (:func:`~ndebench.platform.report.paper.pairing.within_se`): a spread over sets below it is
    no estimate of the between-set spread. That rule is a choice, so beside it every row is also read with the floor
    as the SE of such a row (``floor_se``; ``p_difference_floored``, Holm over the rows then tested,
    ``verdict_floored``): the other defensible reading, as the sets then spread no more than their seed noise."""
    rows, floored = [], []
    for r in across.itertuples(index=False):
        study_df, paper_df = r.study_n_datasets - 1, r.paper_n_datasets - 1
        floor = (within or {}).get((r.model, r.split), math.nan)
        missing = math.isfinite(r.study_se) and (not agr.measured(r.study_se, r.study_improvement)
                                                 or (math.isfinite(floor) and r.study_se < floor))
        study_se = math.nan if missing else r.study_se
        low, high = agr.t_interval(r.study_improvement, study_se, study_df)
        p_low, p_high = agr.t_interval(r.paper_improvement, r.paper_improvement_se, paper_df)
        diff = agr.welch(r.study_improvement, study_se, study_df, r.paper_improvement, r.paper_improvement_se,
                         paper_df)
        margin = MARGIN_FRACTION * abs(r.paper_improvement)
        alternative = agr.welch(r.study_improvement, floor, study_df, r.paper_improvement, r.paper_improvement_se,
                                paper_df) if missing and math.isfinite(floor) else diff
        floored.append((alternative["p"], agr.tost(alternative["difference"], alternative["se"], alternative["df"],
                                                   margin)))
        rows.append({"model": r.model, "split": r.split, "table": r.table, "study_n_datasets": r.study_n_datasets,
                     "study_improvement": r.study_improvement, "study_df": study_df, "study_ci_low": low,
                     "study_ci_high": high, "paper_improvement": r.paper_improvement, "paper_df": paper_df,
                     "paper_ci_low": p_low, "paper_ci_high": p_high, "difference": diff["difference"],
                     "diff_df": diff["df"], "diff_ci_low": diff["ci_low"], "diff_ci_high": diff["ci_high"],
                     "p_difference": diff["p"], "margin": margin,
                     "p_tost": agr.tost(diff["difference"], diff["se"], diff["df"], margin),
                     "study_mde": agr.mde(study_se, study_df),
                     "power_at_paper": agr.power(r.paper_improvement, study_se, study_df), "study_se": study_se,
                     "paper_se": r.paper_improvement_se, "study_se_missing": missing,
                     "floor_se": floor if missing else math.nan})
    frame = _table_family(_with_verdicts(pd.DataFrame(rows, columns=ACROSS_COLUMNS)))
    if floored:
        p_diff, p_tost = (agr.holm([f[i] for f in floored]) for i in (0, 1))
        frame["p_difference_floored"] = [f[0] for f in floored]
        frame["p_difference_holm_floored"] = p_diff
        frame["verdict_floored"] = [agr.verdict(d, e) for d, e in zip(p_diff, p_tost, strict=True)]
    return frame


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


def near_ceiling(baseline_mean: float, improvement: float) -> bool:
    """Whether a set's baseline leaves no more room to 1 than ``improvement`` (equality included, at the paper's
    precision :data:`CEILING_TOLERANCE`: room 0.0533 for a gain printed 0.053 is none): there the paper's gain
    cannot show in full."""
    return 1 - baseline_mean <= improvement + CEILING_TOLERANCE


def per_set_power(runs: pd.DataFrame, primary: dict[str, str], across: pd.DataFrame, baseline: str,
                  tests: pd.DataFrame, test: str) -> pd.DataFrame:
    """Per row of ``across``: the paper's per-set effect size, the power of the per-set ``test`` at it with the
    arms correlated at the study's median r where seeds pair the cells
    (:func:`~ndebench.platform.report.paper.pairing.median_correlation`; ``power_independent``: with independent
    arms, as the paper's unpaired design assumes), and the observed (``test``'s p < alpha in ``tests``, better)
    and expected counts of significant sets (module docstring; columns :data:`POWER_COLUMNS`); ``power_student`` and
    ``significant_sets_student``: the same under the paper's unpaired Student t on the same arms."""
    paper = paper_summary().set_index(["split", "model"])
    r_arms = pairing.median_correlation(tests)
    found = tests.set_index(["model", "dataset"])
    rows = []
    for r in across.itertuples(index=False):
        ref = paper.loc[(r.split, r.model)]
        d = float(ref["improvement"]) / math.sqrt((ref["baseline_std"] ** 2 + ref["proposed_std"] ** 2) / 2)
        q = pw.per_set_power(d, r_arms, test, PAPER_SEEDS)
        hits, student_hits = ([ds for ds in r.study_datasets if found.loc[(r.model, ds), column] < agr.ALPHA
                               and found.loc[(r.model, ds), "difference"] > 0] for column in ("p_test", "p_unpaired"))
        ok = runs[(runs["status"] == "ok") & (runs["model"] == r.model) & (row_names(runs) == baseline)]
        ceiling = [ds for ds in r.study_datasets
                   if near_ceiling(ok[ok["dataset"] == ds][primary[ds]].astype(float).mean(),
                                   float(ref["improvement"]))]
        rows.append({"model": r.model, "split": r.split, "paper_d": d, "power": q,
                     "power_independent": pw.per_set_power(d, 0.0, "student", PAPER_SEEDS),
                     "study_sets": r.study_n_datasets, "study_significant": len(hits), "significant_sets": hits,
                     "sets": list(r.study_datasets), "expected_significant": q * r.study_n_datasets,
                     "ceiling_sets": ceiling,
                     "power_student": q if test == "student" else pw.per_set_power(d, r_arms, "student", PAPER_SEEDS),
                     "significant_sets_student": student_hits})
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def _ci(low: float, high: float) -> str:
    return "–" if not math.isfinite(low) else f"[{low:+.3f}, {high:+.3f}]"


def _p(p: float) -> str:
    return "–" if not math.isfinite(p) else f"{p:.3g}"


def _num(x: float, fmt: str = "+.3f") -> str:
    return "–" if not math.isfinite(x) else format(x, fmt)


class _Set(NamedTuple):
    """One set of a split row in the per-set count: its powers and whether it is significant under the report's
    test and under Student's t, and whether it is near ceiling."""

    power: float
    independent: float
    hit: bool
    ceiling: bool
    student_power: float
    student_hit: bool


def count_summary(powers: pd.DataFrame, test: str, r_arms: float) -> dict[str, Any]:
    """The univariate and multivariate rows' significant sets against the count the paper's effects give, and the
    chance of so few (:func:`~ndebench.platform.report.statistics.agreement.at_most`) over all their sets and over
    those not near ceiling, at the study's design (``test``, arms correlated at ``r_arms``) and with independent
    arms (the paper's unpaired assumption): ``summary.json``'s ``per_set_count``. Where ``test`` is not Student's,
    ``student`` reads the sets not near ceiling under the paper's Student t on the same arms (its significant sets,
    its power at ``r_arms``, the chance and the verdict), as the verdict can turn on the test."""
    rows = powers[powers["split"] != "all"]
    sets = [_Set(r.power, r.power_independent, d in r.significant_sets, d in r.ceiling_sets, r.power_student,
                 d in r.significant_sets_student) for r in rows.itertuples(index=False) for d in r.sets]
    free = [s for s in sets if not s.ceiling]
    hits, free_hits = sum(s.hit for s in sets), sum(s.hit for s in free)
    chance = agr.at_most(free_hits, [s.power for s in free])
    student_hits = sum(s.student_hit for s in free)
    student_chance = agr.at_most(student_hits, [s.student_power for s in free])
    student = None if test == "student" else {
        "free_significant": student_hits, "free_expected": sum(s.student_power for s in free),
        "free_chance": student_chance, "verdict": "differs" if student_chance < agr.ALPHA else "inconclusive"}
    return {"test": test, "r": r_arms, "sets": len(sets), "significant": hits,
            "expected": sum(s.power for s in sets), "expected_independent": sum(s.independent for s in sets),
            "power_min": min((s.power for s in sets), default=math.nan),
            "power_max": max((s.power for s in sets), default=math.nan),
            "chance": agr.at_most(hits, [s.power for s in sets]), "free_sets": len(free), "free_significant": free_hits,
            "free_expected": sum(s.power for s in free), "free_chance": chance,
            "free_chance_independent": agr.at_most(free_hits, [s.independent for s in free]),
            "verdict": "differs" if chance < agr.ALPHA else "inconclusive", "student": student}


def _count_note(count: dict[str, Any]) -> str:
    if not count["sets"]:
        return ""
    design = (f"arms correlated over seeds at the study's median r = {count['r']:.2f}" if count["r"]
              else "independent arms")
    return (f"Over the univariate and multivariate rows ({count['test']} test, {design}): {count['significant']} of "
            f"{count['sets']} sets significantly better; expected if the paper's effects held: "
            f"{count['expected']:.2f} ({count['expected_independent']:.2f} with independent arms); power per set "
            f"{count['power_min']:.2f}-{count['power_max']:.2f}; chance of at most {count['significant']} if they "
            f"held (Poisson binomial over the sets' powers): {count['chance']:.3f}; over the {count['free_sets']} "
            f"sets not near ceiling, where the paper's gain can show in full: {count['free_significant']} "
            f"significant, chance of at most {count['free_significant']}: {count['free_chance']:.3f} "
            f"({count['free_chance_independent']:.3f} if the arms were independent, the paper's unpaired "
            f"assumption). Read as 'differs' from the paper when that chance is below {agr.ALPHA:g}, else "
            f"'inconclusive': here {count['verdict']}." + _student_note(count))


def _student_note(count: dict[str, Any]) -> str:
    student = count.get("student")
    if not student:
        return ""
    turns = "the verdict turns on the test" if student["verdict"] != count["verdict"] else "the same verdict"
    return (f" Under the paper's unpaired Student t on the same arms: {student['free_significant']} of the "
            f"{count['free_sets']} sets not near ceiling significant, expected {student['free_expected']:.2f}, "
            f"chance of at most {student['free_significant']}: {student['free_chance']:.3f}, {student['verdict']} "
            f"({turns}).")


def _study_text(r: Any) -> str:
    if r.study_n_datasets < 1:
        return "no set"
    if r.study_df < 1:
        return f"{_num(r.study_improvement)} (1 set: no interval)"
    if r.study_se_missing:
        return f"{_num(r.study_improvement, '+.3f')} (SE below the sets' seed noise: no interval)"
    return f"{_num(r.study_improvement)} {_ci(r.study_ci_low, r.study_ci_high)} df={r.study_df}"


def with_ceilings(across: pd.DataFrame, powers: pd.DataFrame) -> pd.DataFrame:
    """``across`` (:func:`across_agreement`) with ``ceiling_sets``: the row's study sets near ceiling, from the
    same (model, split) row of :func:`per_set_power`; a row all of whose sets are near ceiling reads
    :data:`CEILING` under either Holm family, as its sets cannot show the paper's gain."""
    ceilings = {(p.model, p.split): list(p.ceiling_sets) for p in powers.itertuples(index=False)}
    out = across.assign(ceiling_sets=[ceilings.get((r.model, r.split), []) for r in across.itertuples(index=False)])
    full = [bool(r.study_n_datasets) and len(r.ceiling_sets) == r.study_n_datasets for r in out.itertuples(index=False)]
    return out.assign(**{column: [CEILING if f else v for f, v in zip(full, out[column], strict=True)]
                         for column in ("verdict", "verdict_table", "verdict_floored")})


def _ceiling_note(across: pd.DataFrame) -> str:
    """The rows that differ from the paper while half or more of their study sets are near ceiling."""
    rows = [f"{r.model} {r.split} ({len(r.ceiling_sets)} of {r.study_n_datasets})"
            for r in across.itertuples(index=False)
            if r.verdict == "differs" and 2 * len(r.ceiling_sets) >= r.study_n_datasets]
    return ("Near ceiling: the study's sets whose none mean leaves no more room to 1 than the paper's improvement "
            f"(per-set power table). A row all of whose sets are near ceiling reads '{CEILING}'; a row that "
            "differs with half or more of its sets near ceiling may differ by the sets' ceiling, not the method: "
            "there the study's improvement cannot reach the paper's. "
            + (f"Such rows: {', '.join(rows)}." if rows else "No row that differs is such a row."))


def _family_note(across: pd.DataFrame) -> str:
    turns = [f"{r.model} {r.split}: p {_p(r.p_difference)}, Holm {_p(r.p_difference_holm)} over the table's "
             f"{int(across['p_difference'].notna().sum())} tested rows ({r.verdict}), "
             f"{_p(r.p_difference_holm_table)} over Table {r.table}'s "
             f"{int(across.loc[across['table'] == r.table, 'p_difference'].notna().sum())} ({r.verdict_table})"
             for r in across.itertuples(index=False) if r.verdict != r.verdict_table]
    return ("Holm family: " + ("the verdict turns on the choice for " + "; ".join(turns) + "." if turns
                               else "no verdict turns on the choice."))


def _floor_note(across: pd.DataFrame) -> str:
    """The rows without a test because their SE is below the seed-noise floor, read with the floor as their SE."""
    rows = across[across["floor_se"].notna()] if len(across) else across
    if rows.empty:
        return ""
    tested = int(across["p_difference_floored"].notna().sum())
    read = [f"{r.model} {r.split}: floor {r.floor_se:.4f}, p {_p(r.p_difference_floored)}, Holm "
            f"{_p(r.p_difference_holm_floored)} over the {tested} rows then tested: {r.verdict_floored}"
            + (f" (this table: {r.verdict})" if r.verdict_floored != r.verdict else " (the same verdict)")
            for r in rows.itertuples(index=False)]
    changed = [f"{r.model} {r.split}" for r in across.itertuples(index=False)
               if math.isnan(r.floor_se) and r.verdict_floored != r.verdict]
    return ("Seed-noise floor (a choice): a row whose SE over sets is below the SE its sets' seed noise alone gives "
            "gets no test here; read instead with that floor as its SE, " + "; ".join(read) + "."
            + (f" The larger Holm family also changes {', '.join(changed)}." if changed else ""))


def verdict_counts(across: pd.DataFrame) -> str:
    """``Verdicts: agrees a of n, differs b of n, inconclusive c of n`` (a ceiling row counted inconclusive)."""
    labels = [v.split(" ")[0] for v in across["verdict"]] if len(across) else []
    ceiling = sum(v == CEILING for v in across["verdict"]) if len(across) else 0
    return ("Verdicts: " + ", ".join(f"{v} {labels.count(v)} of {len(labels)}" for v in agr.VERDICTS)
            + (f" ({ceiling} of them at ceiling)" if ceiling else ""))


def across_section(across: pd.DataFrame, title: str = "Agreement with the paper across datasets",
                   extra: list[str] | None = None) -> Section:
    """The across-dataset agreement (``across`` from :func:`with_ceilings`) as a report section."""
    across_rows = [[Cell(r.model), Cell(f"{r.split} (Table {r.table})"),
                    Cell(_study_text(r)),
                    Cell(f"{_num(r.paper_improvement)} {_ci(r.paper_ci_low, r.paper_ci_high)} df={r.paper_df}"),
                    Cell(f"{_num(r.difference)} {_ci(r.diff_ci_low, r.diff_ci_high)}"),
                    Cell(f"{_p(r.p_difference)} ({_p(r.p_difference_holm)})"), Cell(_p(r.p_difference_holm_table)),
                    Cell(f"±{r.margin:.3f}: {_p(r.p_tost)} ({_p(r.p_tost_holm)})"),
                    Cell(_num(r.study_mde, ".3f")), Cell(_num(r.power_at_paper, ".2f")),
                    Cell(f"{len(r.ceiling_sets)} of {r.study_n_datasets}"),
                    Cell(r.verdict, flag=r.verdict == "differs")]
                   for r in across.itertuples(index=False)]
    quantiles = ", ".join(f"t(0.975, df = {df}) = {sps.t.ppf(0.975, df):.3f}"
                          for df in sorted({int(d) for d in across["study_df"] if d >= 1}))
    return Section(
        title,
        ["model", "split", "study improvement [95% CI]", "paper improvement [95% CI]", "study - paper [95% CI]",
         "p (Holm)", "p (Holm, table)", "TOST margin: p (Holm)", "study MDE", "power at paper", "near ceiling",
         "verdict"], across_rows,
        "Improvement of continuum_dropout over none, mean over sets with its Student-t 95% interval on sets - 1 "
        "degrees of freedom, for the study and for the paper (its SE over its sets); study - paper: Welch interval "
        "and p (Welch-Satterthwaite df); TOST: equivalence within the margin; study MDE: the smallest improvement "
        "the study's own test against 0 detects with 80% power at alpha 0.05; power at paper: that test's power if "
        "the paper's improvement were true. A study SE at float noise or below the SE its mean has from the sets' "
        "seed noise alone is no estimate of the spread over sets and counts as missing (no interval, no test). "
        + FAMILY_TEXT,
        notes=[n for n in (agr.RULE, MARGIN_TEXT, _family_note(across), _floor_note(across), verdict_counts(across),
                           _ceiling_note(across)) if n]
        + ([f"The study's intervals use t quantiles {quantiles}: with few sets the interval is that many standard "
            "errors wide on each side."] if quantiles else []) + (extra or []),
        flag_legend="differs from the paper")


def agreement_sections(across: pd.DataFrame, cells: pd.DataFrame, powers: pd.DataFrame,
                       count: dict[str, Any]) -> list[Section]:
    """The per-cell agreement and the per-set power (``count`` from :func:`count_summary`) as report sections."""
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
                   Cell(f"{p.power_independent:.2f}"), Cell(f"{p.study_significant} of {p.study_sets}"),
                   Cell(f"{p.expected_significant:.2f}"),
                   Cell(", ".join(p.ceiling_sets) or "–", flag=bool(p.ceiling_sets))]
                  for p in powers.itertuples(index=False)]
    d_text = ("Power of the same test with independent arms at d = 0.5 and 1: "
              f"{pw.per_set_power(0.5, 0.0, count['test'], PAPER_SEEDS):.2f} and "
              f"{pw.per_set_power(1.0, 0.0, count['test'], PAPER_SEEDS):.2f}.")
    third = Section(
        "Per-set power at the paper's effect",
        ["model", "split", "paper's d", f"power per set ({count['test']}, r = {count['r']:.2f})",
         "power, independent arms", "study: significant sets", "expected if the paper holds", "near ceiling"],
        power_rows,
        "paper's d: the paper's improvement over its mean per-set seed std (Tables 9-11: sqrt of the mean of "
        f"baseline_std^2 and proposed_std^2); power: the report's two-sided {count['test']} test, {PAPER_SEEDS} seeds "
        "per side, alpha 0.05, with the arms correlated over seeds at the study's median r where seeds pair the cells "
        "(statsmodels TTestPower for the paired test; for Student's or Welch's a simulation with scipy's ttest_ind, "
        "as the pooled variance overstates the noise of a paired difference); independent arms: the paper's "
        "unpaired assumption (TTestIndPower); significant: validation-selected continuum_dropout better than none "
        f"with the {count['test']} test's p < 0.05; expected: power x sets; near ceiling: sets whose baseline mean "
        "leaves no more room to the maximum (1) than the paper's improvement, so that the paper's gain cannot show "
        "there in full.",
        notes=[n for n in (_count_note(count), d_text) if n], flag_legend="near ceiling")
    return [second, third]


def agreement_json(across: pd.DataFrame, cells: pd.DataFrame, powers: pd.DataFrame,
                   count: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``'s ``paper_comparison`` keys of this module."""
    return {"agreement_across_datasets": across.to_dict(orient="records"), "per_set_count": count,
            "verdict_counts": verdict_counts(across),
            "agreement_cells": cells.to_dict(orient="records"), "per_set_power": powers.to_dict(orient="records"),
            "agreement_rule": {"rule": agr.RULE, "margin": MARGIN_TEXT, "alpha": agr.ALPHA, "power": agr.POWER,
                               "correction": "holm", "family": FAMILY_TEXT}}
