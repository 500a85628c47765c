"""Selection audit: the validation-selected result of a searched regularizer beside the best-of-grid test mean.

ndebench evaluates each regularizer at the configuration its search chose on **validation** data; that is
what every table shows. Reporting instead the best test mean over the grid's points (an **oracle** that
selects on the test set, as the Continuum Dropout paper's regularized rows do) compares a maximum over many
configurations with the baseline's single one, so it is optimistic. Where a study has the grid's
fixed-parameter variant cells (``variants: {continuum_dropout: grid}``), the audit shows per (model, dataset,
regularizer) both numbers and the gap on the primary metric, and the oracle's difference from ``none`` with its
plain p-value (paired t-test of that one cell over the seeds it shares with ``none``) and its selection-adjusted p-value
(:func:`~ndebench.platform.report.statistics.selection.selection_adjusted_p`: a max-statistic permutation test over the
seeds
that counts the choice among K grid points).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from ndebench.platform.report.render.format import fmt_p
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import selection, stats
from ndebench.regularizers.none import BASELINE

COLUMNS = ["model", "dataset", "regularizer", "validation_selected", "oracle", "oracle_variant", "gap", "n_variants",
           "oracle_difference", "oracle_plain_p", "selection_adjusted_p"]
OPTIMISTIC = ("The oracle is the best test mean over the grid's variant cells, the configuration chosen on the test "
              "set itself: a maximum over {k} configurations against the baseline's one, so it is optimistic. The "
              "tables use the validation-selected configuration.")
ADJUSTED = ("Oracle - none: the oracle's mean minus none's; plain p: paired t-test of that one cell against none "
            "over the seeds they share, as if it had not been chosen; selection-adjusted p: how often the best of "
            "the K grid points would beat none by at least this much if no grid point differed from none "
            "(max-statistic permutation test over the seeds, Westfall-Young). Both pair the runs of one seed, which "
            "share the data split and initialisation in every cell, so the two p-values differ only by the "
            "selection.")
SKIPPED = ("no regularizer has fixed-parameter variant cells, so there is no grid to audit; add "
           "`variants: {<regularizer>: grid}` to the config")


def selection_audit(runs: pd.DataFrame, primary: dict[str, str]) -> pd.DataFrame:
    """One row per (model, dataset, regularizer) with both a tuned cell and variant cells over its grid (columns
    :data:`COLUMNS`).

    ``runs`` has one row per evaluate run with ``regularizer`` (the regularizer it trained with) and ``variant``
    (the variant cell's label, ``""`` for the tuned cell), as :func:`~ndebench.platform.record.runs.study_frame`
    reads them; ``primary`` maps datasets to their primary metric column. ``validation_selected`` is the tuned
    cell's mean over its ``ok`` seeds, ``oracle`` the best mean over the variant cells (``oracle_variant`` its
    label) and ``gap`` how much better the oracle looks: ``oracle - validation_selected``, sign-adjusted so
    that a positive gap is an optimistic oracle whatever the metric's direction.

    Against ``none`` (NaN without its runs): ``oracle_difference`` (oracle mean minus ``none``'s, raw),
    ``oracle_plain_p`` (two-sided paired t-test of the oracle cell alone over the seeds it shares with ``none``, as
    if it had not been selected: the design of the permutation test) and
    ``selection_adjusted_p`` (one-sided, for a best-of-K difference this good,
    :func:`~ndebench.platform.report.statistics.selection.selection_adjusted_p`)."""
    if "variant" not in runs.columns:
        return pd.DataFrame(columns=COLUMNS)
    ok = runs[runs["status"] == "ok"]
    # The baseline's variants are controls (none averaged over n_mc passes), not points of a searched grid.
    variants = ok[(ok["variant"].fillna("") != "") & (ok["regularizer"] != BASELINE)]
    rows = []
    for (model, dataset, regularizer, label), group in variants.groupby(["model", "dataset", "regularizer", "variant"],
                                                                        sort=True):
        rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "label": label,
                     "mean": float(group[primary[dataset]].astype(float).mean())})
    means = pd.DataFrame(rows, columns=["model", "dataset", "regularizer", "label", "mean"])
    out = []
    for (model, dataset, regularizer), grid in means.groupby(["model", "dataset", "regularizer"], sort=True):
        metric = primary[dataset]
        sign = 1.0 if stats.higher_is_better(metric) else -1.0
        tuned = ok[(ok["model"] == model) & (ok["dataset"] == dataset) & (ok["regularizer"] == regularizer)
                   & (ok["variant"].fillna("") == "")]
        if tuned.empty:
            continue
        selected = float(tuned[metric].astype(float).mean())
        best = grid.loc[(sign * grid["mean"]).idxmax()]
        pair = ok[(ok["model"] == model) & (ok["dataset"] == dataset)]
        out.append({"model": model, "dataset": dataset, "regularizer": regularizer, "validation_selected": selected,
                    "oracle": float(best["mean"]), "oracle_variant": best["label"],
                    "gap": sign * (float(best["mean"]) - selected), "n_variants": len(grid),
                    **_against_baseline(pair, metric, list(grid["label"]), best["label"], sign > 0)})
    return pd.DataFrame(out, columns=COLUMNS)


def _by_seed(runs: pd.DataFrame, metric: str) -> dict[int, float]:
    values = runs[["seed", metric]].astype(float).dropna()
    return {int(s): float(v) for s, v in zip(values["seed"], values[metric], strict=True)}


def _against_baseline(pair: pd.DataFrame, metric: str, labels: list[str], oracle: str,
                      higher: bool) -> dict[str, float]:
    """The oracle against ``none`` on one (model, dataset): raw difference, plain and selection-adjusted p."""
    baseline = _by_seed(pair[(pair["regularizer"] == BASELINE) & (pair["variant"].fillna("") == "")], metric)
    if not baseline:
        return {"oracle_difference": math.nan, "oracle_plain_p": math.nan, "selection_adjusted_p": math.nan}
    grid = {label: _by_seed(pair[pair["variant"].fillna("") == label], metric) for label in labels}
    best = np.array(list(grid[oracle].values()))
    base = np.array(list(baseline.values()))
    plain = stats.two_sample_test(best, base, "paired", list(grid[oracle]), list(baseline))
    return {"oracle_difference": float(best.mean() - base.mean()), "oracle_plain_p": plain.p,
            "selection_adjusted_p": selection.selection_adjusted_p(baseline, grid, higher_is_better=higher)}


def audit_section(audit: pd.DataFrame, primary: dict[str, str]) -> Section:
    """The audit as a report section (Markdown, LaTeX and ``report.html`` render the same object)."""
    rows = [[Cell(r.model), Cell(r.dataset), Cell(r.regularizer), Cell(_fmt(r.validation_selected)),
             Cell(_fmt(r.oracle)), Cell(r.oracle_variant), Cell(_fmt(r.gap, sign=True)),
             Cell(_fmt(r.oracle_difference, sign=True)), Cell(fmt_p(r.oracle_plain_p)),
             Cell(fmt_p(r.selection_adjusted_p))]
            for r in audit.itertuples(index=False)]
    metrics = ", ".join(sorted({primary[d] for d in audit["dataset"]}))
    k = int(audit["n_variants"].max()) if len(audit) else 0
    caption = (f"Test {metrics} of the configuration chosen on validation (what the tables show) and of the best "
               f"grid point on test (the oracle); gap = oracle minus validation-selected, positive when the oracle "
               f"looks better. " + OPTIMISTIC.format(k=k) + " " + ADJUSTED)
    return Section("Selection audit: validation-selected vs best-of-grid on test",
                   ["model", "dataset", "regularizer", "validation-selected", "oracle", "oracle variant", "gap",
                    "oracle - none", "plain p", "selection-adjusted p"],
                   rows, caption)


def audit_json(audit: pd.DataFrame) -> dict[str, object]:
    """``summary.json``'s ``selection_audit`` (the rows) and, when there is none, ``selection_audit_skipped``."""
    if audit.empty:
        return {"selection_audit": [], "selection_audit_skipped": SKIPPED}
    return {"selection_audit": audit.drop(columns="n_variants").to_dict(orient="records")}


def _fmt(x: float, sign: bool = False) -> str:
    return "–" if not math.isfinite(x) else (f"{x:+.3f}" if sign else f"{x:.3f}")
