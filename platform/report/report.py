"""Study reports: ``results.csv``, ``table.md``, ``table.tex``, ``summary.json`` and PNG figures.

:func:`build_report` turns a frame of evaluate-phase runs (one row per run; columns ``run_id, study, model,
dataset, regularizer, seed, status``, metric columns ``test_*``, ``test_protocol``, an optional ``metric``
(the dataset's registered primary metric, tag ``ndebench.metric``) and an optional per-run ``calibration``
dict from :func:`~ndebench.platform.common.metrics.calibration_bins`) into paper-style tables: rows are
regularizers, column groups are models and columns datasets, cells are "mean (std)" over seeds with
``*``/``**`` for the t-test against ``none`` and the best value per column in bold. This module validates
the runs, picks the metrics and computes each analysis once; the table model is
:mod:`~ndebench.platform.report.render.tables` and the files are written by :mod:`~ndebench.platform.report.document`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.record.schema import COUNTED_STATUSES, LISTED_STATUSES
from ndebench.platform.report import audit, controls, document, learning
from ndebench.platform.report.integrity import fingerprint_line, integrity_markdown, integrity_warning
from ndebench.platform.report.machines import machines
from ndebench.platform.report.paper.comparison import paper_comparison
from ndebench.platform.report.render import forest, papertex, sections
from ndebench.platform.report.render.drawing import figure_mode, pair_count
from ndebench.platform.report.render.format import fmt, fmt_p
from ndebench.platform.report.render.leftout import left_out_markdown
from ndebench.platform.report.render.studyfigures import pooled_calibration, study_figures
from ndebench.platform.report.render.tables import (
    LABELS,
    TEST_NAMES,
    Table,
    markdown,
    status_line,
    study_sections,
    table_rows,
)
from ndebench.platform.report.statistics import significance, stats
from ndebench.platform.report.statistics.coverage import seed_coverage
from ndebench.platform.report.statistics.learned import ALPHA as LEARNED_ALPHA
from ndebench.platform.report.statistics.learned import RULE
from ndebench.platform.report.statistics.rows import cell_columns, row_names
from ndebench.regularizers.none import BASELINE

METRICS = ("test_accuracy", "test_top5_accuracy", "test_auroc", "test_nll", "test_ece")
REQUIRED = ("model", "dataset", "regularizer", "seed", "status")


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by :func:`build_report`; ``paths`` lists them all (e.g. to log as MLflow artifacts).
    ``tables`` are the statistics of the tables, ``shown`` the sections ``table.md`` and ``table.tex`` render (the
    tables, their effect sizes and the across-dataset comparison), for ``report.html`` to render too, and
    ``paper`` the sections comparing the study with the paper's numbers (``paper=True``); ``changed`` the runs whose
    results changed after they ended and ``fingerprint`` the line naming the study's fingerprint (``""`` if none);
    ``audit`` the selection audit's section and ``control`` the MC control's (none when the study has nothing to
    audit or no control cell) and ``notes`` the sentences of the critical-difference gates and the machines, each
    computed once for ``table.md`` and handed to ``report.html`` and the analyses' files."""

    directory: Path
    results_csv: Path
    table_md: Path
    table_tex: Path
    summary_json: Path
    figures: tuple[Path, ...]
    tables: tuple[Table, ...] = ()
    shown: tuple[sections.Section, ...] = ()
    paper: tuple[sections.Section, ...] = ()
    changed: tuple[dict[str, Any], ...] = ()
    fingerprint: str = ""
    audit: tuple[sections.Section, ...] = ()
    control: tuple[sections.Section, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[Path, ...]:
        full = self.table_tex.parent.glob("table_full.tex")
        return (self.results_csv, self.table_md, self.table_tex, *full, self.summary_json, *self.figures)


def primary_metrics(runs: pd.DataFrame) -> dict[str, str]:
    """Primary metric column of each dataset: ``test_<metric>``, where ``metric`` is the dataset's registered
    primary metric (``accuracy``, ``auroc`` or ``top5_accuracy``) that every trial run records as the tag
    ``ndebench.metric`` (column ``metric`` of the runs frame).

    Only for a dataset none of whose runs carries that tag (runs recorded before it existed) is the metric
    inferred from the columns, as the paper chooses it: ``test_auroc`` where the dataset's runs report it
    (binary tasks), else ``test_top5_accuracy`` (100-class tasks), else ``test_accuracy``. Raises
    ``ValueError`` when the runs of one dataset are tagged with different metrics, or with an unknown one."""
    out = {}
    for dataset, group in runs.groupby("dataset", sort=True):
        tagged = sorted({m for m in group["metric"] if isinstance(m, str) and m}) if "metric" in group else []
        if len(tagged) > 1:
            raise ValueError(f"the runs of dataset {dataset!r} are tagged with different primary metrics "
                             f"{tagged} (tag ndebench.metric); choose one with metric='test_<name>'")
        if tagged:
            stats.higher_is_better(tagged[0])
            out[dataset] = f"test_{tagged[0]}"
        else:
            out[dataset] = next((m for m in ("test_auroc", "test_top5_accuracy") if _reported(group, m)),
                                "test_accuracy")
    return out


def with_primary_metrics(runs: pd.DataFrame, metric: str | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """``runs`` and each dataset's primary metric column (``metric`` for all datasets when given, else
    :func:`primary_metrics`); a primary column that no run recorded (every run of the dataset failed) is
    added as NaN, so that its cells show the failures under the registered metric."""
    primary = {d: metric for d in sorted(set(runs["dataset"]))} if metric else primary_metrics(runs)
    missing = sorted(set(primary.values()) - set(runs.columns))
    return runs.assign(**dict.fromkeys(missing, math.nan)), primary


def _reported(runs: pd.DataFrame, metric: str) -> bool:
    return metric in runs.columns and bool(np.isfinite(runs[metric].astype(float)).any())


def _select_study(runs: pd.DataFrame, study: str) -> pd.DataFrame:
    if "study" in runs.columns:
        present = sorted(set(runs["study"]))
        runs = runs[runs["study"] == study]
        if runs.empty:
            raise ValueError(f"no evaluate-phase runs of study {study!r}; studies in the runs: {present}")
    return runs


def _check_runs(runs: pd.DataFrame, test: str, alpha: float) -> None:
    missing = [c for c in REQUIRED if c not in runs.columns]
    if missing:
        raise ValueError(f"runs lack the columns {missing}; required: {', '.join(REQUIRED)}")
    if runs.empty:
        raise ValueError("no evaluate-phase runs to report")
    stats.check_test(test)
    stats.check_alpha(alpha)


def has_results(runs: pd.DataFrame) -> bool:
    """Whether some ``ok`` run reports a finite value of some test metric (else there is nothing to tabulate)."""
    ok = runs[runs["status"] == "ok"]
    return any(_reported(ok, m) for m in METRICS)


def _validate(runs: pd.DataFrame, metric: str | None, test: str, alpha: float) -> pd.DataFrame:
    _check_runs(runs, test, alpha)
    runs = runs[runs["status"].isin(COUNTED_STATUSES)]
    if not any(m in runs.columns for m in METRICS):
        raise ValueError(f"runs have no metric column; expected some of {', '.join(METRICS)}")
    if metric is not None and metric not in runs.columns:
        valid = [m for m in METRICS if m in runs.columns]
        raise ValueError(f"metric {metric!r} is not among the runs' metrics: {', '.join(valid)}")
    stats.check_test(test)
    stats.check_alpha(alpha)
    return runs.sort_values([*cell_columns(runs), "seed"], kind="stable").reset_index(drop=True)


def build_report(runs: pd.DataFrame, out_dir: Path, study: str, *, metric: str | None = None,
                 test: str = "student", alpha: float = 0.05, correction: str = "none",
                 planned_seeds: list[int] | None = None, curves: pd.DataFrame | None = None,
                 left_out: list[dict[str, Any]] | None = None, figures: str = "auto",
                 paper: bool = False, protocol: dict[str, str] | None = None,
                 changed: list[dict[str, Any]] | None = None, fingerprint: str | None = None,
                 failed: Mapping[str, str] | None = None, check: pd.DataFrame | None = None) -> ReportFiles:
    """Write the report of ``study`` into ``out_dir/<study>/`` and return the paths; rows are named by each
    run's ``label`` (:func:`~ndebench.platform.report.render.tables.table_rows`).

    Tables (``table.md`` and ``table.tex``, booktabs) for the primary metric (``metric``, or each dataset's
    :func:`primary_metrics`), then NLL and ECE where reported. Cells are the mean (sample std, ddof=1) of
    the ``ok`` runs; ``*`` (better) or ``†`` (worse) marks p < ``alpha`` and ``**``/``††`` p < ``alpha / 5``
    in a two-sided ``test`` (``student``, ``welch`` or ``paired``) against ``none``, the p-values adjusted
    by ``correction`` (:mod:`~ndebench.platform.report.statistics.significance`); the best mean per column is bold;
    a cell whose n differs from the table's usual n, or that lost runs to divergence or errors, says so.
    ``summary.json`` holds every statistic with its p-value, the across-dataset comparison
    (:func:`~ndebench.platform.report.statistics.stats.compare_across_datasets`, Wilcoxon with Holm), run counts.
    Figures (:mod:`~ndebench.platform.report.render.studyfigures`), as ``figures`` (``auto``, ``all``, ``summary`` or
    ``none``, :func:`~ndebench.platform.report.render.drawing.figure_mode`) says, named in ``table.md`` and
    ``summary.json`` (``figures``): a reliability diagram per (model, dataset) when runs carry calibration bins,
    a per-seed box/strip plot of the primary metric per (model, dataset), and a critical-difference diagram
    per model that passes :func:`~ndebench.platform.report.statistics.significance.friedman_gate` (else
    ``table.md`` says why not).

    Selection audit (:mod:`~ndebench.platform.report.audit`): where a regularizer's grid was run as variant cells,
    ``table.md`` and ``summary.json`` (``selection_audit``) set the validation-selected result beside the
    best-of-grid test mean (the optimistic oracle); otherwise ``selection_audit_skipped`` says why.

    Learning (:mod:`~ndebench.platform.report.learning`): a cell whose test accuracy is not shown above chance
    ``1/K`` (:mod:`~ndebench.platform.report.statistics.learned`) is flagged "did not learn" in every table and listed
    in ``summary.json`` (``learning``, ``did_not_learn``); with ``curves`` (per-epoch ``train_loss`` and
    ``val_loss`` of the runs, :func:`~ndebench.platform.report.learning.read_curves`) a learning-curve figure per
    (model, dataset) in them shows the mean losses per epoch of each regularizer against the chance level.

    MC control (:mod:`~ndebench.platform.report.controls`): ``table.md`` and ``summary.json`` (``mc_control``)
    compare every regularizer with the ``none[n_mc=N]`` cells and say what isolates dropout from ensembling.

    ``protocol`` (:func:`~ndebench.platform.report.study.protocol_note`): which protocol produced the rows, a
    line of ``table.md`` and ``summary.json``'s ``protocol``; its ``tests``, when there, a line saying why the
    tests are the ones they are (:func:`~ndebench.platform.report.study.design_test`).

    Paper comparison (``paper=True``, :mod:`~ndebench.platform.report.paper.comparison`, its per-set counts under
    ``test``): every cell beside the paper's cells with the same names and the across-dataset improvement beside
    Tables 9-11, in ``table.md`` and ``summary.json`` (``paper_comparison``).

    ``left_out`` (:func:`~ndebench.platform.record.completeness.left_out_finished`): finished runs not counted
    (another config, a seed or cell no longer planned, a duplicate), each with why, listed in ``table.md`` and
    ``summary.json`` (``left_out_runs``), with or without results. ``changed``
    (:func:`~ndebench.platform.report.integrity.changed_runs`): runs whose results changed after they ended, a
    warning atop ``table.md`` and a list at its end, and ``summary.json`` (``changed_results``). ``fingerprint``
    (:func:`~ndebench.platform.report.integrity.fingerprint`): ``summary.json``'s and a line of ``table.md``.
    ``failed`` (cell label -> its first error): the cells the sweep recorded as failed, the last section of
    ``table.md`` and ``table.tex``.

    ``table.md`` is one ordered list of parts written once (:func:`~ndebench.platform.report.document.write_tables`),
    and each analysis in it is computed once; :class:`ReportFiles` hands its results on to ``report.html``.

    Runs still ``running`` (a sweep in progress) or ``stopped`` are counted and listed but left out of the
    statistics; each cell names the ``planned_seeds`` (default: every seed recorded in the study) that have no
    run yet and its running ones. A study with no ``ok`` result gets a report of its counts and of each
    failed run's message instead of tables.
    """
    cells = _select_study(runs, study)
    runs = table_rows(cells)
    _check_runs(runs, test, alpha)
    significance.check_correction(correction)
    directory = Path(out_dir) / study
    directory.mkdir(parents=True, exist_ok=True)
    coverage = seed_coverage(runs, planned_seeds)
    left_out, changed = left_out or [], changed or []
    warned, listed = (f"{integrity_warning(changed)}\n\n" if changed else None), integrity_markdown(changed)
    if not has_results(runs):
        table_md, table_tex = document.write_tables(directory, [warned, document.no_results_text(runs, study, coverage),
                                                                left_out_markdown(left_out), listed],
                                                    f"% Study {study}: generated by ndebench. No run finished ok; see "
                                                    "table.md.\n", failed)
        summary = {"study": study, "test": test, "alpha": alpha, "results": False,
                   "runs": {str(k): int(v) for k, v in runs["status"].value_counts().items()},
                   "failed": document.records(document.written(runs).loc[
                       runs["status"] != "ok", [c for c in (*REQUIRED, "message") if c in runs.columns]]),
                   "left_out_runs": left_out, "changed_results": changed}
        return ReportFiles(directory, document.write_csv(runs, directory), table_md, table_tex,
                           document.write_json(summary | _coverage_json(coverage), directory), (),
                           changed=tuple(changed))
    pending = runs[~runs["status"].isin(COUNTED_STATUSES)]
    runs, primary = with_primary_metrics(_validate(runs, metric, test, alpha), metric)
    everything = pd.concat([runs, pending], ignore_index=True)
    # Each analysis once: the files below, report.html and the analyses' own files show these objects.
    check = learning.learning_check(runs) if check is None else check
    tables = study_tables(runs, primary, test, alpha, check, correction, coverage)
    across = stats.compare_across_datasets(runs, primary, alpha=alpha)
    gates = cd_gates(runs, primary, alpha)
    mode, figure_note = figure_mode(figures, pair_count(runs))
    selection = audit.selection_audit(with_primary_metrics(cells, metric)[0], primary)
    control = controls.control_comparisons(runs, primary, test, alpha)
    compared, compared_json = paper_comparison(runs, primary, test=test) if paper else ([], {})
    machine = machines(everything)
    noted = fingerprint_line(study, fingerprint, changed) if fingerprint else ""
    audited = [audit.audit_section(selection, primary)] if not selection.empty else []
    controlled = [s for s in [controls.control_section(control)] if s is not None]
    shown = study_sections(study, tables, across, alpha)
    table_md, table_tex = document.write_tables(directory, [
        warned, markdown(study, everything, tables, across, alpha),
        "".join(f"- {model}: {sentence}\n" for model, (_, sentence) in gates.items()), f"\n{figure_note}\n",
        *(f"\n{protocol[k]}\n" for k in ("rows", "tests") if protocol and k in protocol),
        *audited, *controlled, left_out_markdown(left_out), *compared,
        *(f"\n{line}\n" for line in (machine["note"], noted) if line), listed,
    ], papertex.document(study, tables, alpha), failed)
    papertex.write_full(directory, study, tables, across, alpha)
    summary = (_summary(study, everything, tables, across, primary, test, alpha) | _coverage_json(coverage)
               | _learning_json(check) | audit.audit_json(selection) | controls.controls_json(control)
               | {"left_out_runs": left_out, "changed_results": changed} | compared_json
               | ({"protocol": protocol} if protocol else {}) | ({"fingerprint": fingerprint} if fingerprint else {})
               | {"figures": {"mode": mode, "setting": figures, "note": figure_note}, "machines": machine})
    mean = learning.mean_curves(curves, runs) if curves is not None and not curves.empty else None
    paths = study_figures(runs, primary, directory, alpha, gates, mode, mean, check)
    paths += forest.forest_figures(tables, directory) if mode != "none" else []
    notes = [f"{model}: {sentence}" for model, (_, sentence) in gates.items()] + [n for n in [machine["note"]] if n]
    return ReportFiles(directory, document.write_csv(everything, directory), table_md, table_tex,
                       document.write_json(summary, directory), tuple(paths), tuple(tables), tuple(shown),
                       tuple(compared), tuple(changed), noted, tuple(audited), tuple(controlled), tuple(notes))


def study_tables(runs: pd.DataFrame, primary: dict[str, str], test: str, alpha: float, check: pd.DataFrame,
                 correction: str = "none", coverage: pd.DataFrame | None = None) -> list[Table]:
    """The tables of a report: the primary metric, then NLL and ECE where reported and not primary; cells
    that did not learn (``check``, :func:`~ndebench.platform.report.learning.learning_check` of ``runs``) are
    flagged in each."""
    flagged = learning.flags(check)
    tables = [Table.build(runs, primary, "primary", test, alpha, correction, coverage, flagged)]
    for extra in ("test_nll", "test_ece"):
        if _reported(runs, extra) and extra not in set(primary.values()):
            tables.append(Table.build(runs, {d: extra for d in primary}, LABELS[extra], test, alpha, correction,
                                      coverage, flagged))
    return tables


def cd_gates(runs: pd.DataFrame, primary: dict[str, str], alpha: float) -> dict[str, tuple[bool, str]]:
    """Per model: whether its critical-difference diagram is drawn, and the sentence saying why (not)."""
    return {model: significance.friedman_gate(stats.signed_means(group, primary, model), alpha)
            for model, group in runs.groupby("model", sort=True)}


def _learning_json(check: pd.DataFrame) -> dict[str, Any]:
    return {"learning": {"rule": RULE, "alpha": LEARNED_ALPHA, "cells": document.records(check)},
            "did_not_learn": document.records(check.loc[check["learned"].eq(False),
                                                [*stats.CELL, "test_accuracy", "chance_accuracy", "p_above_chance",
                                                 "final_train_loss"]])}


def _coverage_json(coverage: pd.DataFrame) -> dict[str, Any]:
    return {"incomplete_cells": document.records(coverage[coverage["note"] != ""])}


def _summary(study: str, runs: pd.DataFrame, tables: list[Table], across: pd.DataFrame, primary: dict[str, str],
             test: str, alpha: float) -> dict[str, Any]:
    strong = alpha / 5
    return {
        "study": study, "test": test, "test_description": TEST_NAMES[test], "alpha": alpha,
        "strong_alpha": strong, "baseline": BASELINE,
        "correction": tables[0].correction,
        "markers": {"*": f"better, p < {alpha:g}", "**": f"better, p < {strong:g}",
                    "†": f"worse, p < {alpha:g}", "††": f"worse, p < {strong:g}"},
        "runs": {s: int((runs["status"] == s).sum())
                 for s in (*LISTED_STATUSES, *sorted(set(runs["status"]) - set(LISTED_STATUSES)))},
        "primary_metric": primary,
        "tables": [{"title": t.title, "cells": document.records(t.cell_stats),
                    "comparisons": document.records(t.comparisons)} for t in tables],
        "across_datasets": {"correction": stats.CORRECTION, "rows": document.records(across)},
        "calibration": pooled_calibration(runs),
    }


def format_console_table(runs: pd.DataFrame, *, metric: str | None = None, test: str = "student",
                         alpha: float = 0.05, correction: str = "none", table: Table | None = None) -> str:
    """Plain-text summary printed at the end of a sweep: per cell the metric, n, mean, std, failed runs and,
    for every regularizer, the difference, t, df and p-value of ``test`` against ``none`` with its marker.
    Without any ``ok`` result: the run counts and each failed run's message. ``table``: the primary table
    :func:`build_report` made of the same runs with the same settings, when at hand."""
    _check_runs(runs, test, alpha)
    if not has_results(runs):
        failed = runs[runs["status"] != "ok"].sort_values([*cell_columns(runs), "seed"],
                                                          kind="stable").head(20)
        return "\n".join([status_line(runs), "No evaluate-phase run finished ok with a test metric:"]
                         + [f"  {r.model} x {r.dataset} x {name} seed {r.seed}: {r.status}"
                            + (f": {str(r.message)[:200]}" if getattr(r, "message", "") else "")
                            for r, name in zip(failed.itertuples(index=False), row_names(failed), strict=True)])
    counts = status_line(runs)
    runs, primary = with_primary_metrics(_validate(runs, metric, test, alpha), metric)
    table = table or Table.build(runs, primary, "primary", test, alpha, correction,
                                 flagged=learning.flags(learning.learning_check(runs)))
    tests = {tuple(r[c] for c in stats.CELL): r for r in table.comparisons.to_dict("records")}
    rows = []
    rank = {r: i for i, r in enumerate(table.rows)}
    ordered = table.cell_stats.sort_values(["model", "dataset", "regularizer"], key=lambda c: c.map(rank)
                                           if c.name == "regularizer" else c)
    for row in ordered.itertuples(index=False):
        key = (row.model, row.dataset, row.regularizer)
        c = tests.get(key)
        failed = ", ".join(f"{int(n)} {w}" for n, w in ((row.n_diverged, "diverged"), (row.n_error, "error")) if n)
        rows.append({
            "model": row.model, "dataset": row.dataset, "regularizer": row.regularizer,
            "metric": LABELS.get(row.metric, row.metric), "n": row.n, "mean": fmt(row.mean), "std": fmt(row.std),
            "failed": failed or "-",
            "diff": _console_diff(row.regularizer, c),
            "t": "" if c is None else fmt(c["t"], 2), "df": "" if c is None else fmt(c["df"], int(c["df"] % 1 != 0)),
            "p": "" if c is None else fmt_p(c["p"]) + ("" if correction != "none" else c["marker"]),
            **({} if correction == "none" else
               {f"p {correction}": "" if c is None else fmt_p(c["p_adjusted"]) + c["marker"]}),
            "note": " ".join(x for x in ("" if c is None else stats.note(c), "" if c is None else c["flag"],
                                         learning.FLAG if key in table.flagged else "") if x),
        })
    body = pd.DataFrame(rows).to_string(index=False)
    n_tests = int(np.isfinite(table.comparisons["p"].to_numpy(float)).sum())
    return (f"{body}\n{TEST_NAMES[test]} against none; "
            + significance.caption(correction, n_tests, alpha).replace("\\", "")
            + f"; mean (sample std) over the ok runs.\n{counts}")


def _console_diff(regularizer: str, comparison: dict[str, Any] | None) -> str:
    if comparison is not None:
        return fmt(comparison["difference"], sign=True)
    return "baseline" if regularizer == BASELINE else f"no {BASELINE} runs"
