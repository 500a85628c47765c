"""The many-method comparison (:mod:`~ndebench.platform.report.methods.comparison`) as report sections: per model, the
per-set table (mean (std), best bold, markers against ``none``), the paired tests against each reference, the average
ranks with the Friedman test and the critical-difference diagram, and the Bayesian comparison of Continuum Dropout
with each other method; ``methods.json`` holds every number."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from ndebench.platform.report.methods.claims import table2_claims
from ndebench.platform.report.methods.comparison import FOCUS, REFERENCES, ROPE, ModelComparison, compare_models
from ndebench.platform.report.render import figures
from ndebench.platform.report.render.format import fmt, fmt_p
from ndebench.platform.report.render.sections import Cell, Section, mean_std
from ndebench.platform.report.render.tables import LABELS, TEST_NAMES
from ndebench.platform.report.statistics import bayes, significance
from ndebench.regularizers.none import BASELINE

SKIPPED = "no model with at least 3 methods (none included) on at least 2 datasets"


def methods_sections(runs: pd.DataFrame, primary: dict[str, str], test: str, alpha: float,
                     directory: Path) -> list[Section]:
    """The sections of every model that :func:`~ndebench.platform.report.methods.comparison.compare_models` compares,
    its critical-difference diagram drawn into ``directory`` and ``directory/methods.json`` written; none (and no
    file) when no model qualifies."""
    compared = compare_models(runs, primary, test, alpha)
    out: list[Section] = []
    for comparison in compared:
        out += model_sections(comparison, primary, test, alpha, directory)
    if compared:
        (directory / "methods.json").write_text(json.dumps(methods_json(compared, test, alpha), indent=2,
                                                           allow_nan=False))
    return out


def model_sections(c: ModelComparison, primary: dict[str, str], test: str, alpha: float,
                   directory: Path) -> list[Section]:
    """The sections of one model's comparison: per-set table, paired tests, ranks, the Bayesian comparison and the
    paper's Table 2 claims, the last two where the study has Continuum Dropout and the paper's methods."""
    sections = [_per_set(c, primary, alpha), _tests(c, test, alpha), _ranks(c, alpha, directory)]
    claims = table2_claims(c, alpha)
    return (sections + ([_bayes(c)] if c.bayes else [])
            + ([_claims(c, claims)] if claims else []))


def _metric_names(c: ModelComparison, primary: dict[str, str]) -> str:
    return " / ".join(sorted({LABELS.get(primary[d], primary[d]) for d in c.datasets}))


def _per_set(c: ModelComparison, primary: dict[str, str], alpha: float) -> Section:
    cells = {(r.dataset, r.method): r for r in c.cells.itertuples(index=False)}
    against_none = {(r.dataset, r.method): r for r in c.tests.itertuples(index=False)
                    if len(c.tests) and r.baseline == BASELINE}
    rows = []
    for dataset in c.datasets:
        row = [Cell(dataset)]
        for method in c.methods:
            cell = cells.get((dataset, method))
            if cell is None:
                row.append(Cell("–"))
                continue
            test = against_none.get((dataset, method))
            mark = "" if test is None else significance.marker(test.p_holm, test.direction, alpha, alpha / 5)
            row.append(Cell(mean_std(cell.mean, cell.std, cell.n), bold=bool(cell.best), marker=mark))
        rows.append(row)
    rows.append([Cell("average rank")] + [Cell(fmt(c.ranks.get(m, math.nan), 2), bold=m == c.ranks.index[0])
                                          for m in c.methods])
    caption = (f"{c.model}: test {_metric_names(c, primary)}, mean (sample std) over seeds, best per set in bold; "
               f"*/** better and †/†† worse than {BASELINE} at Holm-adjusted p < {alpha:g} / {alpha / 5:g} "
               f"(family: the {len(c.methods) - 1} methods of one set against {BASELINE}); average rank over the "
               f"{c.friedman['n_datasets']} sets where every method has a result (1 = best).")
    return Section(f"{c.model}: every method on every set", ["dataset", *c.methods], rows, caption,
                   align="l" + "r" * len(c.methods))


def _tests(c: ModelComparison, test: str, alpha: float) -> Section:
    references = [r for r in REFERENCES if r in c.methods]
    by = {(r.dataset, r.method, r.baseline): r for r in c.tests.itertuples(index=False)} if len(c.tests) else {}
    rows = []
    for dataset in c.datasets:
        for method in c.methods:
            row = [Cell(dataset), Cell(method)]
            for reference in references:
                found = by.get((dataset, method, reference))
                row += ([Cell(fmt(found.difference, sign=True)), Cell(fmt_p(found.p)), Cell(fmt_p(found.p_holm))]
                        if found is not None else [Cell("–"), Cell("–"), Cell("–")])
            rows.append(row)
    header = ["dataset", "method"] + [h for r in references for h in (f"diff vs {r}", f"p vs {r}", f"Holm p vs {r}")]
    caption = (f"{c.model}: each method against {' and '.join(references)} on each set, {TEST_NAMES[test]}; "
               f"Holm's correction over the family of one set and one reference (the other methods of the set), "
               f"alpha = {alpha:g}. A difference is the method's mean minus the reference's, in the metric's units.")
    return Section(f"{c.model}: paired tests per set", header, rows, caption,
                   align="ll" + "r" * (len(header) - 2), groups=[])


def _ranks(c: ModelComparison, alpha: float, directory: Path) -> Section:
    wins = c.cells[c.cells["best"]].groupby("method").size()
    rows = [[Cell(m), Cell(fmt(c.ranks[m], 2), bold=i == 0), Cell(str(int(wins.get(m, 0))))]
            for i, m in enumerate(c.ranks.index)]
    f = c.friedman
    verdict = ("rejects equal ranks" if f["p"] < alpha else "does not reject equal ranks: no method's rank "
               "differs from another's") if not math.isnan(f["p"]) else "not computable"
    caption = (f"{c.model}: average rank over {f['n_datasets']} sets (1 = best; ties averaged) and sets won (ties "
               f"count for each); Friedman test over {f['n_datasets']} sets and {f['n_methods']} methods "
               f"(scipy.stats.friedmanchisquare): chi2 = {fmt(f['chi2'])}, p = {fmt_p(f['p'])}, {verdict} at "
               f"alpha = {alpha:g}. Diagram: bars join methods whose Holm-adjusted Wilcoxon signed-rank p >= "
               f"{alpha:g} (scikit-posthocs).")
    path = directory / f"methods_cd_{c.model.replace('_', '-')}.png"
    drawn = figures.critical_difference_diagram(c.ranks, c.pairs, alpha, path, f"{c.model}: average ranks")
    return Section(f"{c.model}: average ranks", ["method", "average rank", "sets won"], rows, caption,
                   figures=[drawn, drawn.with_suffix(".pdf")], align="lrr")


def _bayes(c: ModelComparison) -> Section:
    rows = [[Cell(other), Cell(str(r.n)), Cell(fmt(r.better)), Cell(fmt(r.equivalent)), Cell(fmt(r.worse)),
             Cell(r.decision, bold=r.decision != "no decision")] for other, r in c.bayes.items()]
    caption = (f"{c.model}: {FOCUS} against each other method, Bayesian signed-rank test over the sets' mean scores "
               f"(baycomp; Benavoli et al. 2017): posterior probabilities that {FOCUS} is better by more than "
               f"{ROPE:g}, within the region of practical equivalence [-{ROPE:g}, {ROPE:g}], or worse by more, in "
               f"the metric's units; a probability above {bayes.DECISION:g} decides.")
    return Section(f"{c.model}: {FOCUS} against each method (Bayesian)",
                   ["method", "sets", f"P({FOCUS} better)", "P(equivalent)", f"P({FOCUS} worse)", "decision"],
                   rows, caption, align="lrrrrl")


def _claims(c: ModelComparison, claims: list) -> Section:
    rows = [[Cell(k.claim), Cell(k.paper), Cell(k.study), Cell(k.verdict, bold=True)] for k in claims]
    caption = (f"{c.model}: the paper's Table 2 claims (Neural ODE, four UEA sets) against this study's sets. Rules: "
               + " ".join(f"{k.claim}: {k.rule}." for k in claims))
    return Section(f"{c.model}: the paper's Table 2 claims", ["claim", "the paper", "this study", "verdict"], rows,
                   caption, align="llll")


def methods_json(compared: list[ModelComparison], test: str, alpha: float) -> dict[str, Any]:
    """Every number of the comparison, per model (NaN as None)."""
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and math.isnan(value) else value

    def records(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
        if frame.empty:
            return []
        return [{k: clean(v) for k, v in row.items()} for row in frame[columns].to_dict("records")]

    return {"test": test, "alpha": alpha, "correction": "holm", "rope": ROPE, "focus": FOCUS,
            "models": {c.model: {
                "methods": c.methods, "datasets": c.datasets,
                "cells": records(c.cells, ["dataset", "method", "metric", "n", "mean", "std", "rank", "best"]),
                "tests": records(c.tests, ["dataset", "method", "baseline", "difference", "t", "df", "p", "p_holm",
                                           "family", "direction"]),
                "average_ranks": {m: float(r) for m, r in c.ranks.items()},
                "friedman": {k: clean(float(v)) for k, v in c.friedman.items()},
                "pairwise_wilcoxon": records(c.pairs, ["a", "b", "n_datasets", "p", "p_holm"]),
                "bayes": {other: {"n": r.n, "better": clean(r.better), "equivalent": clean(r.equivalent),
                                  "worse": clean(r.worse), "decision": r.decision} for other, r in c.bayes.items()},
                "table2_claims": [dataclasses.asdict(k) for k in table2_claims(c, alpha)],
            } for c in compared}}
