"""Study reports: ``results.csv``, ``table.md``, ``table.tex``, ``summary.json`` and PNG figures.

:func:`build_report` turns a frame of evaluate-phase runs (one row per run; columns ``run_id, study, model,
dataset, regularizer, seed, status``, metric columns ``test_*``, ``test_protocol`` and an optional per-run
``calibration`` dict from :func:`~ndebench.platform.metrics.calibration_bins`) into paper-style tables: rows
are regularizers, column groups are models and columns datasets, cells are "mean (std)" over seeds with
``*``/``**`` for the t-test against ``none`` and the best value per column in bold.
"""
from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform import figures, significance, stats
from ndebench.platform.metrics import merge_calibration_bins

METRICS = ("test_accuracy", "test_top5_accuracy", "test_auroc", "test_nll", "test_ece")
LABELS = {"test_accuracy": "accuracy", "test_top5_accuracy": "top-5 accuracy", "test_auroc": "AUROC",
          "test_nll": "NLL", "test_ece": "ECE"}
TEST_NAMES = {
    "student": "Student's two-sample t-test (scipy.stats.ttest_ind, pooled variance)",
    "welch": "Welch's two-sample t-test (scipy.stats.ttest_ind, equal_var=False)",
    "paired": "paired t-test over the seeds both cells share (scipy.stats.ttest_rel)",
}
REQUIRED = ("model", "dataset", "regularizer", "seed", "status")
# Statuses the statistics count; any other (``running``, ``stopped``) is reported beside the tables.
STATS_STATUSES = ("ok", "diverged", "error")
DIGITS = 3


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by :func:`build_report`; ``paths`` lists them all (e.g. to log as MLflow artifacts)."""

    directory: Path
    results_csv: Path
    table_md: Path
    table_tex: Path
    summary_json: Path
    figures: tuple[Path, ...]

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.results_csv, self.table_md, self.table_tex, self.summary_json, *self.figures)


def primary_metrics(runs: pd.DataFrame) -> dict[str, str]:
    """Primary metric of each dataset, as in the paper: ``test_auroc`` where the dataset's runs report it
    (binary tasks), else ``test_top5_accuracy`` (100-class tasks), else ``test_accuracy``."""
    out = {}
    for dataset, group in runs.groupby("dataset", sort=True):
        out[dataset] = next((m for m in ("test_auroc", "test_top5_accuracy") if _reported(group, m)),
                            "test_accuracy")
    return out


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
    runs = runs[runs["status"].isin(STATS_STATUSES)]
    if not any(m in runs.columns for m in METRICS):
        raise ValueError(f"runs have no metric column; expected some of {', '.join(METRICS)}")
    if metric is not None and metric not in runs.columns:
        valid = [m for m in METRICS if m in runs.columns]
        raise ValueError(f"metric {metric!r} is not among the runs' metrics: {', '.join(valid)}")
    stats.check_test(test)
    stats.check_alpha(alpha)
    return runs.sort_values([*stats.CELL, "seed"], kind="stable").reset_index(drop=True)


def build_report(runs: pd.DataFrame, out_dir: Path, study: str, *, metric: str | None = None,
                 test: str = "student", alpha: float = 0.05, correction: str = "none",
                 planned_seeds: list[int] | None = None) -> ReportFiles:
    """Write the report of ``study`` into ``out_dir/<study>/`` and return the paths.

    Tables (``table.md`` and ``table.tex``, booktabs) for the primary metric (``metric``, or each dataset's
    :func:`primary_metrics`), then NLL and ECE where reported. Cells are the mean (sample std, ddof=1) of
    the ``ok`` runs; ``*`` (better) or ``†`` (worse) marks p < ``alpha`` and ``**``/``††`` p < ``alpha / 5``
    in a two-sided ``test`` (``student``, ``welch`` or ``paired``) against ``none``, the p-values adjusted
    by ``correction`` (:mod:`~ndebench.platform.significance`); the best mean per column is bold; a cell
    whose n differs from the table's usual n, or that lost runs to divergence or errors, says so.
    ``summary.json`` holds every statistic with its p-value, the across-dataset comparison
    (:func:`~ndebench.platform.stats.compare_across_datasets`, Wilcoxon with Holm) and the run counts.
    Figures: a reliability diagram per (model, dataset) when runs carry calibration bins, a per-seed
    box/strip plot of the primary metric per (model, dataset), and a critical-difference diagram per model
    that passes :func:`~ndebench.platform.significance.friedman_gate` (else ``table.md`` says why not).

    Runs still ``running`` (a sweep in progress) or ``stopped`` are counted and listed but left out of the
    statistics; each cell names the ``planned_seeds`` (default: every seed recorded in the study) that have no
    run yet and its running ones. A study with no ``ok`` result gets a report of its counts and of each
    failed run's message instead of tables.
    """
    runs = _select_study(runs, study)
    _check_runs(runs, test, alpha)
    significance.check_correction(correction)
    directory = Path(out_dir) / study
    directory.mkdir(parents=True, exist_ok=True)
    coverage = seed_coverage(runs, planned_seeds)
    if not has_results(runs):
        return _report_without_results(runs, directory, study, coverage, test, alpha)
    pending = runs[~runs["status"].isin(STATS_STATUSES)]
    runs = _validate(runs, metric, test, alpha)
    strong = alpha / 5
    primary = {d: metric for d in sorted(set(runs["dataset"]))} if metric else primary_metrics(runs)
    tables = study_tables(runs, primary, test, alpha, correction, coverage)
    across = stats.compare_across_datasets(runs, primary, alpha=alpha)
    everything = pd.concat([runs, pending], ignore_index=True)
    results_csv = _write_csv(everything, directory)
    table_md = directory / "table.md"
    gates = cd_gates(runs, primary, alpha)
    table_md.write_text(_markdown(study, everything, tables, across, alpha, coverage)
                        + "".join(f"- {model}: {sentence}\n" for model, (_, sentence) in gates.items()))
    table_tex = directory / "table.tex"
    table_tex.write_text(_latex(study, tables, across, alpha))
    summary = _summary(study, everything, tables, across, primary, test, alpha, strong) | _coverage_json(coverage)
    summary_json = directory / "summary.json"
    summary_json.write_text(json.dumps(_clean(summary), indent=2, allow_nan=False))
    return ReportFiles(directory, results_csv, table_md, table_tex, summary_json,
                       tuple(_figures(runs, primary, directory, alpha, gates)))


def study_tables(runs: pd.DataFrame, primary: dict[str, str], test: str, alpha: float,
                 correction: str = "none", coverage: pd.DataFrame | None = None) -> list[_Table]:
    """The tables of a report: the primary metric, then NLL and ECE where reported and not primary."""
    tables = [_Table.build(runs, primary, "primary", test, alpha, correction, coverage)]
    for extra in ("test_nll", "test_ece"):
        if _reported(runs, extra) and extra not in set(primary.values()):
            tables.append(_Table.build(runs, {d: extra for d in primary}, LABELS[extra], test, alpha, correction,
                                       coverage))
    return tables


def cd_gates(runs: pd.DataFrame, primary: dict[str, str], alpha: float) -> dict[str, tuple[bool, str]]:
    """Per model: whether its critical-difference diagram is drawn, and the sentence saying why (not)."""
    return {model: significance.friedman_gate(stats.signed_means(group, primary, model), alpha)
            for model, group in runs.groupby("model", sort=True)}


def seed_coverage(runs: pd.DataFrame, planned_seeds: list[int] | None = None) -> pd.DataFrame:
    """Per cell (every model x dataset x regularizer combination seen in ``runs``): the planned seeds without
    any run (``missing_seeds``), the seeds still ``running`` or ``stopped``, and a one-line ``note``.

    ``planned_seeds`` defaults to the union of the seeds recorded in the study."""
    seeds = sorted(planned_seeds if planned_seeds is not None else {int(s) for s in runs["seed"] if int(s) >= 0})
    models, datasets, regularizers = (sorted(set(runs[c])) for c in stats.CELL)
    rows = []
    for model, dataset, regularizer in itertools.product(models, datasets, regularizers):
        cell = runs[(runs["model"] == model) & (runs["dataset"] == dataset) & (runs["regularizer"] == regularizer)]
        if cell.empty and not _cell_planned(runs, model, dataset, regularizer):
            continue
        by_status = {status: sorted(int(s) for s in group["seed"]) for status, group in cell.groupby("status")}
        missing = [seed for seed in seeds if seed not in set(cell["seed"])]
        notes = [f"{len(v)} {k} (seed {', '.join(map(str, v))})" for k, v in by_status.items()
                 if k not in STATS_STATUSES]
        notes += [f"no run for seed {', '.join(map(str, missing))}"] if missing else []
        rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "missing_seeds": missing,
                     "running_seeds": by_status.get("running", []), "stopped_seeds": by_status.get("stopped", []),
                     "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=[*stats.CELL, "missing_seeds", "running_seeds", "stopped_seeds", "note"])


def _cell_planned(runs: pd.DataFrame, model: str, dataset: str, regularizer: str) -> bool:
    """A sweep crosses models, datasets and regularizers: a combination is planned when each of its three
    parts has runs together with the others' (the same model on the dataset, the regularizer on the model)."""
    pairs = {tuple(p) for p in runs[["model", "dataset"]].itertuples(index=False, name=None)}
    with_reg = {tuple(p) for p in runs[["model", "regularizer"]].itertuples(index=False, name=None)}
    return (model, dataset) in pairs and (model, regularizer) in with_reg


def _coverage_json(coverage: pd.DataFrame) -> dict[str, Any]:
    return {"incomplete_cells": _records(coverage[coverage["note"] != ""])}


def _write_csv(runs: pd.DataFrame, directory: Path) -> Path:
    path = directory / "results.csv"
    runs.drop(columns="calibration", errors="ignore").to_csv(path, index=False)
    return path


def _status_line(runs: pd.DataFrame) -> str:
    counts = runs["status"].value_counts()
    others = sorted(set(counts.index) - set(STATS_STATUSES))
    parts = [f"{int(counts.get(s, 0))} {s}" for s in (*STATS_STATUSES, *others)]
    line = f"{len(runs)} evaluate-phase runs: " + ", ".join(parts) + "."
    if "running" in counts:
        line += (" Running runs belong to a sweep in progress (or to one that was stopped: "
                 "`ndebench run --resume` finishes them); the tables cover the finished runs.")
    return line


def _failed_lines(runs: pd.DataFrame, limit: int = 50) -> list[str]:
    """Markdown list of the runs that did not finish ok, with their messages."""
    failed = runs[runs["status"] != "ok"].sort_values([*stats.CELL, "seed"], kind="stable")
    if failed.empty:
        return []
    lines = ["## Runs that did not finish ok", ""]
    for row in failed.head(limit).itertuples(index=False):
        message = str(getattr(row, "message", "") or "").replace("\n", " ")
        lines.append(f"- {_md_escape(f'{row.model} / {row.dataset} / {row.regularizer}')}, seed {row.seed}: "
                     f"{row.status}" + (f": {_md_escape(message[:300])}" if message else ""))
    if len(failed) > limit:
        lines.append(f"- ... and {len(failed) - limit} more (see results.csv)")
    return lines + [""]


def _report_without_results(runs: pd.DataFrame, directory: Path, study: str, coverage: pd.DataFrame,
                            test: str, alpha: float) -> ReportFiles:
    """The report of a study none of whose runs finished ok with a metric: counts, gaps and messages."""
    results_csv = _write_csv(runs, directory)
    lines = [f"# Study {study}", "", _status_line(runs), "",
             "No evaluate-phase run finished ok with a test metric, so there is no table.", ""]
    gaps = coverage[coverage["note"] != ""]
    if not gaps.empty:
        lines += ["## Incomplete cells", ""] + [f"- {_md_escape(f'{r.model} / {r.dataset} / {r.regularizer}')}: "
                                                 f"{r.note}" for r in gaps.itertuples(index=False)] + [""]
    lines += _failed_lines(runs)
    table_md = directory / "table.md"
    table_md.write_text("\n".join(lines))
    table_tex = directory / "table.tex"
    table_tex.write_text(f"% Study {study}: generated by ndebench. No run finished ok; see table.md.\n")
    summary = {"study": study, "test": test, "alpha": alpha, "results": False,
               "runs": {str(k): int(v) for k, v in runs["status"].value_counts().items()},
               "failed": _records(runs.loc[runs["status"] != "ok",
                                           [c for c in (*REQUIRED, "message") if c in runs.columns]])}
    summary_json = directory / "summary.json"
    summary_json.write_text(json.dumps(_clean(summary | _coverage_json(coverage)), indent=2, allow_nan=False))
    return ReportFiles(directory, results_csv, table_md, table_tex, summary_json, ())


@dataclass
class _Cell:
    text: str
    marker: str = ""
    bold: bool = False
    note: str = ""


@dataclass
class _Table:
    """Renderer-agnostic content of one table: ``columns`` are (model, dataset, metric) and ``cells`` map
    (regularizer, column index) to a :class:`_Cell`."""

    title: str
    columns: list[tuple[str, str, str]]
    rows: list[str]
    cells: dict[tuple[str, int], _Cell]
    usual_n: int
    test: str
    cell_stats: pd.DataFrame
    comparisons: pd.DataFrame
    protocols: dict[str, str]
    correction: str = "none"

    @classmethod
    def build(cls, runs: pd.DataFrame, metrics: dict[str, str], title: str, test: str, alpha: float,
              correction: str = "none", coverage: pd.DataFrame | None = None) -> _Table:
        summaries, comparisons = [], []
        for metric in sorted(set(metrics.values())):
            part = runs[runs["dataset"].isin([d for d, m in metrics.items() if m == metric])]
            summaries.append(stats.summarize_cells(part, metric))
            comparisons.append(stats.compare_to_baseline(part, metric, test=test, alpha=alpha))
        cell_stats = pd.concat(summaries, ignore_index=True)
        comparison = pd.concat(comparisons, ignore_index=True)
        comparison["p_holm"] = stats.holm(comparison["p"].to_numpy(float), alpha)
        comparison = significance.mark(comparison, alpha, correction)
        columns = [(m, d, metrics[d]) for m, d in
                   runs[["model", "dataset"]].drop_duplicates().sort_values(["model", "dataset"])
                   .itertuples(index=False)]
        rows = _regularizer_order(runs)
        ok_n = cell_stats.loc[cell_stats["n"] > 0, "n"]
        usual_n = int(ok_n.mode().max()) if len(ok_n) else 0
        by_cell = cell_stats.set_index(stats.CELL)
        tests = comparison.set_index(stats.CELL)
        gaps = {} if coverage is None else {tuple(k): n for k, n in zip(
            coverage[stats.CELL].itertuples(index=False, name=None), coverage["note"]) if n}
        cells = {}
        for j, (model, dataset, metric) in enumerate(columns):
            for regularizer in rows:
                key = (model, dataset, regularizer)
                if key in by_cell.index:
                    cells[(regularizer, j)] = _cell(by_cell.loc[key], tests.loc[key] if key in tests.index else None,
                                                    usual_n, gaps.get(key, ""))
                elif key in gaps:
                    cells[(regularizer, j)] = _Cell("–", note=gaps[key])
            _bold_best(cells, j, rows, by_cell, model, dataset, metric)
        protocols = {}
        if "test_protocol" in runs.columns:
            named = runs[runs["test_protocol"].notna() & (runs["test_protocol"].astype(str) != "")]
            protocols = {r: ", ".join(sorted(set(g["test_protocol"].astype(str))))
                         for r, g in named.groupby("regularizer")}
        return cls(title, columns, rows, cells, usual_n, test, cell_stats, comparison, protocols, correction)

    def metric_names(self) -> list[str]:
        return sorted({m for _, _, m in self.columns})


def _regularizer_order(runs: pd.DataFrame) -> list[str]:
    """``none`` first, then the other regularizers by name."""
    names = set(runs["regularizer"])
    return [stats.BASELINE] * (stats.BASELINE in names) + sorted(names - {stats.BASELINE})


def _cell(row: pd.Series, comparison: pd.Series | None, usual_n: int, gap: str = "") -> _Cell:
    notes = []
    n = int(row["n"])
    if n != usual_n:
        notes.append(f"n={n}")
    notes += [f"{int(row[c])} {word}" for c, word in
              (("n_diverged", "diverged"), ("n_error", "error"), ("n_missing", "missing")) if row[c]]
    notes += [gap] if gap else []
    if comparison is not None and comparison["flag"] and comparison["flag"] != stats.TOO_FEW:
        notes.append(str(comparison["flag"]))
    text = "–" if n == 0 else (f"{row['mean']:.{DIGITS}f}" + (f" ({row['std']:.{DIGITS}f})" if n > 1 else ""))
    marker = comparison["marker"] if comparison is not None else ""
    return _Cell(text, marker, False, "; ".join(notes))


def _bold_best(cells: dict, j: int, rows: list[str], by_cell: pd.DataFrame, model: str, dataset: str,
               metric: str) -> None:
    """Bold every cell of column ``j`` whose mean, rounded as displayed, is the best one."""
    means = {r: round(float(by_cell.loc[(model, dataset, r), "mean"]), DIGITS) for r in rows
             if (model, dataset, r) in by_cell.index and by_cell.loc[(model, dataset, r), "n"] > 0}
    if not means:
        return
    best = (max if stats.higher_is_better(metric) else min)(means.values())
    for r, value in means.items():
        if value == best:
            cells[(r, j)].bold = True


def _caption(table: _Table, alpha: float, tex: bool) -> str:
    """Caption naming the metric, n, the test, alpha and the markers; ``tex`` escapes it for LaTeX."""
    esc = latex_escape if tex else (lambda text: text)
    n_tests = int(np.isfinite(table.comparisons["p"].to_numpy(float)).sum())
    metrics = table.metric_names()
    label = " / ".join(LABELS.get(m, m) for m in metrics)
    directions = "; ".join(f"{LABELS.get(m, m)}: {'higher' if stats.higher_is_better(m) else 'lower'} is better"
                           for m in metrics)
    return (esc(f"Test {label}: mean (sample std) over n = {table.usual_n} seeds per cell (cells with another n, "
                "or with diverged/errored runs, say so in brackets). ")
            + significance.caption(table.correction, n_tests, alpha, tex)
            + esc(f" of a two-sided {TEST_NAMES[table.test]} against none within each model and dataset; "
                  f"bold: best mean per column ({directions})." + _protocol_sentence(table)))


def _protocol_sentence(table: _Table) -> str:
    if not table.protocols:
        return ""
    return " Test-time protocol: " + "; ".join(f"{r}: {p}" for r, p in table.protocols.items()) + "."


def _model_width(columns: list[tuple[str, str, str]]) -> list[tuple[str, int]]:
    return [(model, len(list(group))) for model, group in itertools.groupby(c[0] for c in columns)]


def _column_title(table: _Table, dataset: str, metric: str) -> str:
    return f"{dataset} ({LABELS.get(metric, metric)})" if len(table.metric_names()) > 1 else dataset


# Markdown ---------------------------------------------------------------------------------------------

def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def _md_cell(cell: _Cell | None) -> str:
    if cell is None:
        return "–"
    text = f"**{cell.text}**" if cell.bold else cell.text
    text += _md_escape(cell.marker)
    return text + (f" [{cell.note}]" if cell.note else "")


def _md_table(table: _Table, alpha: float) -> list[str]:
    header = ["regularizer"] + [f"{_md_escape(m)} / {_md_escape(_column_title(table, d, metric))}"
                                for m, d, metric in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * len(table.columns)]
    for r in table.rows:
        lines.append("| " + " | ".join([_md_escape(r)] + [_md_cell(table.cells.get((r, j)))
                                                            for j in range(len(table.columns))]) + " |")
    return lines + ["", _caption(table, alpha, tex=False)]


def _markdown(study: str, runs: pd.DataFrame, tables: list[_Table], across: pd.DataFrame, alpha: float,
              coverage: pd.DataFrame) -> str:
    lines = [f"# Study {study}", "", _status_line(runs), ""]
    for table in tables:
        title = "Primary metric" if table.title == "primary" else table.title
        lines += [f"## {title}", "", *_md_table(table, alpha), ""]
    lines += ["## Across datasets", "", *_md_across(across, alpha), "", *_failed_lines(runs)]
    return "\n".join(lines).rstrip("\n") + "\n"


def _md_across(across: pd.DataFrame, alpha: float) -> list[str]:
    if across.empty:
        return ["No regularizer shares a dataset with the baseline none."]
    lines = ["| model | regularizer | datasets | mean improvement (SE) | % change | wins | Wilcoxon p | Holm p |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in across.itertuples(index=False):
        lines.append(f"| {_md_escape(row.model)} | {_md_escape(row.regularizer)} | {row.n_datasets} | "
                     f"{_fmt(row.mean_improvement, sign=True)} ({_fmt(row.se)}) | {_fmt(row.pct_change, 2, True)} | "
                     f"{row.wins}/{row.n_datasets} | {_fmt_p(row.p)} | {_fmt_p(row.p_holm)} |")
    lines += ["", _across_caption(alpha)]
    notes = sorted({n for n in across["note"] if n})
    return lines + ([""] + [f"- {n}" for n in notes] if notes else [])


def _across_caption(alpha: float) -> str:
    return ("Improvement over none on each dataset's primary metric (sign-adjusted so that positive is "
            "better), averaged over datasets with its standard error; % change is the mean of the per-dataset "
            "relative changes. Wilcoxon signed-rank test over datasets (scipy.stats.wilcoxon, two-sided), "
            f"Holm-corrected over all (model, regularizer) rows (statsmodels multipletests, method='holm'), "
            f"alpha = {alpha:g}.")


def _fmt(x: float, digits: int = DIGITS, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _fmt_p(p: float) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.2e}" if p < 1e-4 else f"{p:.4f}"


# LaTeX ------------------------------------------------------------------------------------------------

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


# Shrinks a table wider than the text to fit, leaves narrower ones at their natural size (graphicx).
_FIT_WIDTH = r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%"


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters (``continuum_dropout`` -> ``continuum\\_dropout``)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def _tex_cell(cell: _Cell | None) -> str:
    if cell is None:
        return "--"
    text = latex_escape(cell.text).replace("–", "--")
    text = rf"\textbf{{{text}}}" if cell.bold else text
    if cell.marker:
        text += "$^{" + cell.marker.replace("†", r"\dagger") + "}$"
    return text + (rf" {{\scriptsize [{latex_escape(cell.note)}]}}" if cell.note else "")


def _label(study: str, title: str) -> str:
    return "tab:" + re.sub(r"[^A-Za-z0-9]+", "-", f"{study}-{title}").strip("-").lower()


def _tex_table(study: str, table: _Table, alpha: float) -> list[str]:
    k = len(table.columns)
    groups = _model_width(table.columns)
    group_row = [""] + [rf"\multicolumn{{{w}}}{{c}}{{{latex_escape(m)}}}" for m, w in groups]
    rules, start = [], 2
    for _, w in groups:
        rules.append(rf"\cmidrule(lr){{{start}-{start + w - 1}}}")
        start += w
    lines = [r"\begin{table}[htbp]", r"\centering",
             rf"\caption{{{_caption(table, alpha, tex=True)}}}",
             rf"\label{{{_label(study, table.title)}}}",
             _FIT_WIDTH, rf"\begin{{tabular}}{{l{'c' * k}}}", r"\toprule",
             " & ".join(group_row) + r" \\", " ".join(rules),
             " & ".join(["Regularizer"] + [latex_escape(_column_title(table, d, m)) for _, d, m in table.columns])
             + r" \\", r"\midrule"]
    for r in table.rows:
        lines.append(" & ".join([latex_escape(r)] + [_tex_cell(table.cells.get((r, j))) for j in range(k)]) + r" \\")
    return lines + [r"\bottomrule", r"\end{tabular}}", r"\end{table}", ""]


def _tex_across(study: str, across: pd.DataFrame, alpha: float) -> list[str]:
    if across.empty:
        return []
    lines = [r"\begin{table}[htbp]", r"\centering",
             rf"\caption{{{latex_escape(_across_caption(alpha))}}}", rf"\label{{{_label(study, 'across')}}}",
             _FIT_WIDTH, r"\begin{tabular}{llrrrrrr}", r"\toprule",
             r"Model & Regularizer & Datasets & Improvement (SE) & \% change & Wins & Wilcoxon $p$ & Holm $p$ \\",
             r"\midrule"]
    for row in across.itertuples(index=False):
        lines.append(" & ".join([latex_escape(row.model), latex_escape(row.regularizer), str(row.n_datasets),
                                 f"{_fmt(row.mean_improvement, sign=True)} ({_fmt(row.se)})",
                                 _fmt(row.pct_change, 2, True), f"{row.wins}/{row.n_datasets}",
                                 _fmt_p(row.p), _fmt_p(row.p_holm)]) + r" \\")
    return lines + [r"\bottomrule", r"\end{tabular}}", r"\end{table}", ""]


def _latex(study: str, tables: list[_Table], across: pd.DataFrame, alpha: float) -> str:
    lines = [f"% Study {study}: generated by ndebench. Needs \\usepackage{{booktabs,graphicx}}.", ""]
    for table in tables:
        lines += _tex_table(study, table, alpha)
    return "\n".join(lines + _tex_across(study, across, alpha))


# summary.json and figures -----------------------------------------------------------------------------

def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dict(orient="records")


def _clean(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN and infinities to None."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _summary(study: str, runs: pd.DataFrame, tables: list[_Table], across: pd.DataFrame, primary: dict[str, str],
             test: str, alpha: float, strong: float) -> dict[str, Any]:
    return {
        "study": study, "test": test, "test_description": TEST_NAMES[test], "alpha": alpha,
        "strong_alpha": strong, "baseline": stats.BASELINE,
        "correction": tables[0].correction,
        "markers": {"*": f"better, p < {alpha:g}", "**": f"better, p < {strong:g}",
                    "†": f"worse, p < {alpha:g}", "††": f"worse, p < {strong:g}"},
        "runs": {s: int((runs["status"] == s).sum())
                 for s in (*STATS_STATUSES, *sorted(set(runs["status"]) - set(STATS_STATUSES)))},
        "primary_metric": primary,
        "tables": [{"title": t.title, "cells": _records(t.cell_stats), "comparisons": _records(t.comparisons)}
                   for t in tables],
        "across_datasets": {"correction": stats.CORRECTION, "rows": _records(across)},
        "calibration": _pooled_calibration(runs),
    }


def _pooled_calibration(runs: pd.DataFrame) -> list[dict[str, Any]]:
    if "calibration" not in runs.columns:
        return []
    ok = runs[(runs["status"] == "ok") & runs["calibration"].map(lambda c: isinstance(c, dict))]
    return [{"model": m, "dataset": d, "regularizer": r, "n_runs": len(g),
             "bins": merge_calibration_bins(list(g["calibration"]))}
            for (m, d, r), g in ok.groupby(stats.CELL, sort=True)]


def _slug(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p) for p in parts)


def _figures(runs: pd.DataFrame, primary: dict[str, str], directory: Path, alpha: float,
             gates: dict[str, tuple[bool, str]]) -> list[Path]:
    paths = []
    calibration = {(c["model"], c["dataset"], c["regularizer"]): c["bins"] for c in _pooled_calibration(runs)}
    order = _regularizer_order(runs)
    for (model, dataset), group in runs.groupby(["model", "dataset"], sort=True):
        names = [r for r in order if r in set(group["regularizer"])]
        curves = {r: calibration[(model, dataset, r)] for r in names if (model, dataset, r) in calibration}
        if curves:
            paths.append(figures.reliability_diagram(curves, directory / f"reliability_{_slug(model, dataset)}.png",
                                                     f"{model} on {dataset}"))
        metric = primary[dataset]
        ok = group[(group["status"] == "ok")]
        values = pd.DataFrame({"regularizer": ok["regularizer"], "value": ok[metric].astype(float)}).dropna()
        failed = {r: ", ".join(f"{len(g2)} {s}" for s, g2 in g.groupby("status"))
                  for r, g in group[group["status"] != "ok"].groupby("regularizer")}
        paths.append(figures.seed_plot(values, names, directory / f"seeds_{_slug(model, dataset)}.png",
                                       f"{model} on {dataset}: one point per seed",
                                       f"test {LABELS.get(metric, metric)}", failed))
    for model, group in runs.groupby("model", sort=True):
        datasets = {d: primary[d] for d in sorted(set(group["dataset"]))}
        ranks = stats.average_ranks(group, datasets, model)
        if gates[model][0]:
            pairs = stats.pairwise_wilcoxon(group, datasets, model, alpha)
            paths.append(figures.critical_difference_diagram(ranks, pairs, alpha, directory / f"cd_{_slug(model)}.png",
                                                             f"{model} over {len(datasets)} datasets"))
    return paths


def format_console_table(runs: pd.DataFrame, *, metric: str | None = None, test: str = "student",
                         alpha: float = 0.05, correction: str = "none") -> str:
    """Plain-text summary printed at the end of a sweep: per cell the metric, n, mean, std, failed runs and,
    for every regularizer, the difference, t, df and p-value of ``test`` against ``none`` with its marker.
    Without any ``ok`` result: the run counts and each failed run's message."""
    _check_runs(runs, test, alpha)
    if not has_results(runs):
        failed = runs[runs["status"] != "ok"].sort_values([*stats.CELL, "seed"], kind="stable")
        return "\n".join([_status_line(runs), "No evaluate-phase run finished ok with a test metric:"]
                         + [f"  {r.model} x {r.dataset} x {r.regularizer} seed {r.seed}: {r.status}"
                            + (f": {str(r.message)[:200]}" if getattr(r, "message", "") else "")
                            for r in failed.head(20).itertuples(index=False)])
    status_line = _status_line(runs)
    runs = _validate(runs, metric, test, alpha)
    primary = {d: metric for d in sorted(set(runs["dataset"]))} if metric else primary_metrics(runs)
    table = _Table.build(runs, primary, "primary", test, alpha, correction)
    tests = table.comparisons.set_index(stats.CELL)
    rows = []
    rank = {r: i for i, r in enumerate(table.rows)}
    ordered = table.cell_stats.sort_values(["model", "dataset", "regularizer"], key=lambda c: c.map(rank)
                                           if c.name == "regularizer" else c)
    for row in ordered.itertuples(index=False):
        key = (row.model, row.dataset, row.regularizer)
        c = tests.loc[key] if key in tests.index else None
        failed = ", ".join(f"{int(n)} {w}" for n, w in ((row.n_diverged, "diverged"), (row.n_error, "error")) if n)
        rows.append({
            "model": row.model, "dataset": row.dataset, "regularizer": row.regularizer,
            "metric": LABELS.get(row.metric, row.metric), "n": row.n, "mean": _fmt(row.mean), "std": _fmt(row.std),
            "failed": failed or "-",
            "diff": _console_diff(row.regularizer, c),
            "t": "" if c is None else _fmt(c["t"], 2), "df": "" if c is None else _fmt(c["df"], 1),
            "p": "" if c is None else _fmt_p(c["p"]) + ("" if correction != "none" else c["marker"]),
            **({} if correction == "none" else
               {f"p {correction}": "" if c is None else _fmt_p(c["p_adjusted"]) + c["marker"]}),
            "note": "" if c is None else " ".join(x for x in (c["direction"], c["flag"]) if x),
        })
    body = pd.DataFrame(rows).to_string(index=False)
    n_tests = int(np.isfinite(table.comparisons["p"].to_numpy(float)).sum())
    return (f"{body}\n{TEST_NAMES[test]} against none; "
            + significance.caption(correction, n_tests, alpha).replace("\\", "")
            + f"; mean (sample std) over the ok runs.\n{status_line}")


def _console_diff(regularizer: str, comparison: pd.Series | None) -> str:
    if comparison is not None:
        return _fmt(comparison["difference"], sign=True)
    return "baseline" if regularizer == stats.BASELINE else f"no {stats.BASELINE} runs"
