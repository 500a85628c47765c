"""The study beside the Continuum Dropout paper's reported numbers (``ndebench report --paper``).

Two comparisons, from the paper's numbers shipped as data (:mod:`~ndebench.platform.report.paper.data`):

- **Per-dataset cells** (Tables 2-7, 12-18): every study cell (model, dataset, regularizer or variant label) on the
  metric the paper reports for it, beside each paper cell with the same names: ``difference = study mean - paper
  mean`` and whether the paper's mean lies inside the study's 95% Student-t interval of the mean
  (``mean +- t_{0.975, n-1} std / sqrt(n)``). Study cells without a paper cell are listed as not reported. A paper
  cell with a ``setting`` matches the variant cell of that label only (Table 5's ``oi=true``/``oi=false`` rows
  name a dataset option the runs do not carry, so a Sepsis study is listed as not reported); times (Tables 7,
  15) are not a test metric and are not compared.
- **Across datasets** (Tables 9-11): per model, the study's Continuum Dropout improvement over ``none`` (mean +- SE
  over datasets, :func:`~ndebench.platform.report.statistics.across.summary_rows`) on all its datasets and split into
  univariate and multivariate ones by their channel count, beside the paper's row for the same split, the number of
  the study's sets among the paper's, and the gain a best-of-20 selection on the test means of 5 seeds shows by
  chance when no grid point differs from ``none``, estimated from the study's own seed spread
  (:func:`~ndebench.platform.report.statistics.selection.chance_gain`).

Beside both, whether the study agrees with the paper's values (intervals on both sides, Welch differences, TOST,
power; :mod:`~ndebench.platform.report.paper.agreement`) and the selection measured on the paper's own numbers
(:mod:`~ndebench.platform.report.paper.evidence`).

A cell of ``scope: time`` (ndebench's extension for CDEs, not the paper's method: the paper keeps a paused
component at its value) is never compared with the paper's Continuum Dropout; it is listed as an extension.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.common.labels import EXTENSION
from ndebench.platform.report.paper import agreement, evidence, needs, pairing
from ndebench.platform.report.paper.data import (
    PAPER_K,
    PAPER_SEEDS,
    SUMMARY_TABLES,
    paper_cells,
    paper_datasets,
    paper_summary,
)
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics import selection, stats
from ndebench.platform.report.statistics.across import channel_count, summary_rows
from ndebench.platform.report.statistics.effects import mean_interval
from ndebench.platform.report.statistics.rows import row_names, scopes
from ndebench.regularizers.none import BASELINE

PROPOSED = "continuum_dropout"
EXTENSION_NOTE = ("scope: time is ndebench's extension for CDEs (a paused component keeps integrating the data); "
                  "the paper pauses the whole increment, so these cells are not compared with its Continuum Dropout")
CELL_COLUMNS = ["table", "model", "dataset", "regularizer", "metric", "paper_mean", "paper_std", "paper_n",
                "study_n", "study_mean", "study_std", "ci_low", "ci_high", "difference", "paper_inside"]


def _label(row: Any) -> str:
    """The study's name of a paper cell: its regularizer with the ``setting`` it fixes, which the paper's data write
    as a label's brackets hold them (``p=0.3,m=50``)."""
    return f"{row.regularizer}[{row.setting}]" if row.setting else row.regularizer


def _extensions(runs: pd.DataFrame) -> set[str]:
    """The rows of ``runs`` that ran ndebench's extension (``params.regularizer.scope`` = ``time``)."""
    return set(row_names(runs)[scopes(runs) == EXTENSION[1]])


def _study_cells(runs: pd.DataFrame, primary: dict[str, str]) -> pd.DataFrame:
    parts = [stats.summarize_cells(runs[runs["dataset"] == d], m) for d, m in primary.items()]
    cells = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["metric", *stats.CELL])
    return cells[cells["n"] > 0].reset_index(drop=True)


def _interval(values: np.ndarray) -> tuple[float, float]:
    low, high = mean_interval(values)
    if math.isnan(low) and len(values) > 1:
        return float(values[0]), float(values[0])
    return low, high


def compare_cells(runs: pd.DataFrame, primary: dict[str, str]) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Each (study cell, paper cell) pair with the same model, dataset, label and metric (columns
    :data:`CELL_COLUMNS`; percentages of the paper as fractions), and the study cells the paper reports nothing
    for, as ``{"model", "dataset", "regularizer", "reason"}`` records."""
    # Table 16 repeats its baseline row in both panels; one comparison per distinct reported value.
    paper = paper_cells().drop_duplicates(["table", "model", "dataset", "regularizer", "setting", "metric", "mean",
                                           "std"])
    paper = paper.assign(key=[_label(r) for r in paper.itertuples(index=False)],
                         value=np.where(paper["unit"] == "percent", paper["mean"] / 100, paper["mean"]),
                         spread=np.where(paper["unit"] == "percent", paper["std"] / 100, paper["std"]))
    ok = runs[runs["status"] == "ok"]
    rows, missing = [], []
    extensions = _extensions(runs)
    for cell in _study_cells(runs, primary).itertuples(index=False):
        names = {"model": cell.model, "dataset": cell.dataset, "regularizer": cell.regularizer}
        if cell.regularizer in extensions:
            missing.append({**names, "reason": f"an extension ({EXTENSION_NOTE})"})
            continue
        metric = cell.metric.removeprefix("test_")
        match = paper[(paper["model"] == cell.model) & (paper["dataset"] == cell.dataset)
                      & (paper["key"] == cell.regularizer) & (paper["metric"] == metric)]
        if match.empty:
            missing.append({**names, "reason": f"the paper reports no {metric} for this cell"})
            continue
        values = ok[(ok["model"] == cell.model) & (ok["dataset"] == cell.dataset)
                    & (row_names(ok) == cell.regularizer)][cell.metric].astype(float).dropna().to_numpy()
        low, high = _interval(values)
        for ref in match.itertuples(index=False):
            rows.append({"table": int(ref.table), "model": cell.model, "dataset": cell.dataset,
                         "regularizer": cell.regularizer, "metric": metric, "paper_mean": float(ref.value),
                         "paper_std": float(ref.spread), "paper_n": int(ref.n), "study_n": int(cell.n),
                         "study_mean": float(cell.mean), "study_std": float(cell.std), "ci_low": low, "ci_high": high,
                         "difference": float(cell.mean) - float(ref.value),
                         "paper_inside": None if math.isnan(low) else bool(low <= ref.value <= high)})
    return pd.DataFrame(rows, columns=CELL_COLUMNS), missing


def _residuals(runs: pd.DataFrame, metric: str) -> np.ndarray:
    """Per-seed deviations from their cell's mean, sign-adjusted (larger is better) and scaled to unbiased."""
    sign = 1.0 if stats.higher_is_better(metric) else -1.0
    out = []
    ok = runs[runs["status"] == "ok"]
    for _, group in ok.groupby(row_names(ok)):
        values = group[metric].astype(float).dropna().to_numpy()
        if len(values) > 1:
            out.append(sign * (values - values.mean()) * math.sqrt(len(values) / (len(values) - 1)))
    return np.concatenate(out) if out else np.array([])


def chance_gains(runs: pd.DataFrame, primary: dict[str, str], model: str, datasets: list[str],
                 k: int = PAPER_K, n: int = PAPER_SEEDS) -> float:
    """Mean over ``datasets`` of the chance gain of a best-of-``k`` selection on ``n`` seeds, each dataset's
    spread from all cells of ``model`` on it."""
    gains = [selection.chance_gain(_residuals(runs[(runs["model"] == model) & (runs["dataset"] == d)], primary[d]),
                                   k, n) for d in datasets]
    finite = [g for g in gains if math.isfinite(g)]
    return float(np.mean(finite)) if finite else math.nan


def _proposed_rows(runs: pd.DataFrame, primary: dict[str, str], datasets: list[str]) -> dict[str, pd.Series]:
    """Per model, the :func:`~ndebench.platform.report.statistics.across.summary_rows` row of ``continuum_dropout``."""
    if not datasets:
        return {}
    rows = summary_rows(runs[runs["dataset"].isin(datasets)], {d: primary[d] for d in datasets})
    return {r["model"]: r for _, r in rows.iterrows() if r["regularizer"] == PROPOSED} if len(rows) else {}


def compare_summary(runs: pd.DataFrame, primary: dict[str, str],
                    channels: dict[str, int | None] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Per model of Tables 9-11 and split (``all``, ``univariate``, ``multivariate``): the paper's row beside the
    study's improvement of ``continuum_dropout`` over ``none`` on its accuracy datasets of that split, with the
    chance gain of best-of-20; and notes on what cannot be compared."""
    channels = channels or {d: channel_count(d) for d in primary}
    paper = paper_summary().set_index(["split", "model"])
    theirs = paper_datasets().groupby("split")["dataset"].apply(set).to_dict()
    accuracy = [d for d, m in primary.items() if m == "test_accuracy"]
    splits = {"all": accuracy, "univariate": [d for d in accuracy if channels.get(d) == 1],
              "multivariate": [d for d in accuracy if (channels.get(d) or 0) > 1]}
    models = sorted(set(runs["model"]))
    notes = [f"{m}: Tables 9-11 have no row for this model" for m in models
             if m not in set(paper.index.get_level_values("model"))]
    studied = {split: _proposed_rows(runs, primary, datasets) for split, datasets in splits.items()}
    rows = []
    for model in (m for m in models if m in set(paper.index.get_level_values("model"))):
        for split in splits:
            ref = paper.loc[(split, model)]
            in_paper = theirs["univariate"] | theirs["multivariate"] if split == "all" else theirs[split]
            s = studied[split].get(model)
            used = list(s["datasets"]) if s is not None else []
            rows.append({
                "model": model, "split": split, "table": SUMMARY_TABLES[split],
                "paper_n_datasets": int(ref["n_datasets"]),
                "paper_baseline": ref["baseline_mean"], "paper_proposed": ref["proposed_mean"],
                "paper_improvement": ref["improvement"], "paper_improvement_se": ref["improvement_se"],
                "paper_pct_change": ref["pct_change"], "paper_pct_se": ref["pct_se"],
                "chance_gain_best_of_k": chance_gains(runs, primary, model, used) if used else math.nan,
                "study_n_datasets": len(used), "study_datasets": used,
                "study_datasets_in_paper": sum(d in in_paper for d in used),
                "study_baseline": math.nan if s is None else s["baseline_mean"],
                "study_proposed": math.nan if s is None else s["mean"],
                "study_improvement": math.nan if s is None else s["mean_improvement"],
                "study_se": math.nan if s is None else s["se"],
                "study_pct_change": math.nan if s is None else s["pct_change"],
                "study_pct_se": math.nan if s is None else s["pct_se"],
            })
    out = pd.DataFrame(rows)
    for row in out.itertuples(index=False) if len(out) else []:
        if row.study_n_datasets and row.study_n_datasets != row.paper_n_datasets:
            notes.append(f"{row.model}, {row.split}: the study's {row.study_n_datasets} sets are not the paper's "
                         f"{row.paper_n_datasets} (among the paper's: {row.study_datasets_in_paper})")
        elif not row.study_n_datasets:
            notes.append(f"{row.model}, {row.split}: the study has no {row.split} accuracy set with both {BASELINE} "
                         f"and {PROPOSED}")
    return out, notes


def _ms(mean: float, std: float, digits: int = 3) -> str:
    return "–" if not math.isfinite(mean) else f"{mean:.{digits}f}" + (f" ({std:.{digits}f})"
                                                                        if math.isfinite(std) else "")


def _pm(x: float, se: float, digits: int = 3) -> str:
    return "–" if not math.isfinite(x) else f"{x:+.{digits}f}" + (f" ± {se:.{digits}f}" if math.isfinite(se) else "")


def missing_notes(missing: list[dict[str, str]]) -> list[str]:
    """One line per (model, dataset) and reason, naming its cells: a study of many variants on sets the paper
    reports only inside Tables 9-11 would otherwise list every cell on a line of its own."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for m in missing:
        grouped.setdefault((m["model"], m["dataset"], m["reason"].replace(" for this cell", "")),
                           []).append(m["regularizer"])
    return [f"Not compared with the paper: {model} / {dataset}: {', '.join(labels)}: {reason}"
            if reason.startswith("an extension") else
            f"Not reported by the paper: {model} / {dataset}: {reason} for {', '.join(labels)}"
            for (model, dataset, reason), labels in grouped.items()]


def paper_sections(cells: pd.DataFrame, missing: list[dict[str, str]], across: pd.DataFrame,
                   notes: list[str]) -> list[Section]:
    """The two comparisons as report sections; a flagged cell's paper mean lies outside the study's interval."""
    cell_rows = [[Cell(str(r.table)), Cell(r.model), Cell(r.dataset), Cell(r.regularizer),
                  Cell(_ms(r.paper_mean, r.paper_std)), Cell(f"{_ms(r.study_mean, r.study_std)} n={r.study_n}"),
                  Cell(f"{r.difference:+.3f}"),
                  Cell("–" if r.paper_inside is None else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"),
                  Cell({True: "yes", False: "no", None: "–"}[r.paper_inside], flag=r.paper_inside is False)]
                 for r in cells.itertuples(index=False)]
    first = Section("The paper's cells beside the study", ["table", "model", "dataset", "regularizer",
                                                            "paper mean (std)", "study mean (std)", "difference",
                                                            "study 95% CI", "paper inside"],
                    cell_rows, "Each study cell beside every cell the paper reports for the same model, dataset, "
                               "regularizer (or variant) and metric; difference = study minus paper; the interval is "
                               "the Student-t 95% interval of the study's mean over its seeds.",
                    notes=missing_notes(missing), flag_legend="the paper's mean lies outside the study's 95% interval")
    if not cell_rows:
        first = Section(first.title, [], [], "The paper reports none of the study's cells per dataset, so there is "
                                             "no table of them.", notes=first.notes)
    across_rows = [[Cell(r.model), Cell(f"{r.split} (Table {r.table}, {r.paper_n_datasets} sets)"),
                    Cell(f"{r.paper_baseline:.3f} -> {r.paper_proposed:.3f}"),
                    Cell(_pm(r.paper_improvement, r.paper_improvement_se)),
                    Cell(f"{r.paper_pct_change:+.2f} ± {r.paper_pct_se:.2f}"),
                    Cell("–" if not math.isfinite(r.chance_gain_best_of_k) else f"{r.chance_gain_best_of_k:+.3f}"),
                    Cell(f"{r.study_n_datasets} ({r.study_datasets_in_paper} of the paper's)"),
                    Cell(_pm(r.study_improvement, r.study_se)), Cell(_pm(r.study_pct_change, r.study_pct_se, 2))]
                   for r in across.itertuples(index=False)]
    second = Section("Across datasets beside the paper's Tables 9-11",
                     ["model", "split", "paper baseline -> proposed", "paper improvement", "paper % change",
                      f"chance gain, best of {PAPER_K}", "study sets", "study improvement", "study % change"],
                     across_rows,
                     f"Improvement of {PROPOSED} over {BASELINE} in accuracy, mean ± standard error over datasets, "
                     "univariate and multivariate by the datasets' channel count. Chance gain: the mean improvement "
                     f"that choosing the best of {PAPER_K} grid points on the test mean of {PAPER_SEEDS} seeds shows "
                     "when no grid point differs from none, estimated from the study's own seed spread on the same "
                     "sets (an upper bound: grid cells that share seeds are correlated); the same at the paper's own "
                     "spread, and the evidence that the paper's cells were chosen on the test set, follow below. "
                     "The study's improvement uses the validation-selected configuration.",
                     notes=notes)
    return [first, second]


def paper_json(cells: pd.DataFrame, missing: list[dict[str, str]], across: pd.DataFrame,
               notes: list[str]) -> dict[str, Any]:
    """``summary.json``'s ``paper_comparison``."""
    return {"paper_comparison": {
        "cells": cells.to_dict(orient="records"), "not_reported": missing,
        "across_datasets": across.to_dict(orient="records") if len(across) else [], "notes": notes,
        "chance_gain": {"k": PAPER_K, "n_seeds": PAPER_SEEDS, "method": "bootstrap of the study's per-seed "
                        "residuals; best of k grid means minus one baseline mean"}}}


def paper_comparison(runs: pd.DataFrame, primary: dict[str, str], channels: dict[str, int | None] | None = None,
                     test: str = "student") -> tuple[list[Section], dict[str, Any]]:
    """Both comparisons of ``runs`` (counted statuses, ``regularizer`` holding variant labels), their agreement
    with the paper's values (:mod:`~ndebench.platform.report.paper.agreement`), the per-set tests paired by seed
    (:mod:`~ndebench.platform.report.paper.pairing`; ``test``, the report's ``--test``, decides the per-set counts),
    the rows without ceiling sets and the sets a study needs (:mod:`~ndebench.platform.report.paper.needs`) and the
    selection measured on the paper's own numbers (:mod:`~ndebench.platform.report.paper.evidence`), as report
    sections and as ``summary.json``'s ``paper_comparison``."""
    cells, missing = compare_cells(runs, primary)
    across, notes = compare_summary(runs, primary, channels)
    rows = list(across.itertuples(index=False)) if len(across) else []
    tests = pairing.set_tests(runs, primary, [(r.model, d) for r in rows if r.split == "all"
                                              for d in r.study_datasets], PROPOSED, BASELINE, test)
    within = {(r.model, r.split): pairing.within_se(tests, r.model, list(r.study_datasets)) for r in rows}
    powers = agreement.per_set_power(runs, primary, across, BASELINE, tests, test)
    agree_across = agreement.with_ceilings(agreement.across_agreement(across, within), powers)
    free = needs.without_ceiling(across, tests, powers) if rows else across
    free_within = {(r.model, r.split): pairing.within_se(tests, r.model, list(r.study_datasets))
                   for r in free.itertuples(index=False)}
    agree_free = agreement.across_agreement(free, free_within)
    agree_free = agree_free.assign(ceiling_sets=[[] for _ in range(len(agree_free))])
    count = agreement.count_summary(powers, test, pairing.median_correlation(tests))
    needed = needs.sets_needed(agree_across)
    chance, maxima = evidence.paper_chance_gains(across), evidence.column_maxima()
    found = paper_json(cells, missing, across, notes)
    found["paper_comparison"] |= (agreement.agreement_json(agree_across, agree_cells := agreement.cell_agreement(cells),
                                                           powers, count)
                                  | {"per_set_tests": tests.to_dict(orient="records"),
                                     "agreement_without_ceiling": agree_free.to_dict(orient="records"),
                                     "sets_needed": needed.to_dict(orient="records")}
                                  | evidence.evidence_json(chance, maxima))
    shown = (paper_sections(cells, missing, across, notes)
             + [agreement.across_section(agree_across),
                agreement.across_section(agree_free, "Agreement with the paper without the sets near ceiling",
                                         ["Each row over its sets not near ceiling only (the first table's 'near "
                                          "ceiling' column), a Holm family of its own."]),
                pairing.set_section(tests, test)]
             + agreement.agreement_sections(agree_across, agree_cells, powers, count)
             + [needs.needs_section(needed, PAPER_SEEDS)]
             + evidence.evidence_sections(chance, maxima))
    # A table without rows says nothing its one-line section (no header) does not.
    return [s for s in shown if s.rows or not s.header], found
