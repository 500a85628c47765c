"""The tables of a study report: their statistics, and the sections that ``table.md``, ``table.tex`` and
``report.html`` render.

A :class:`Table` holds the statistics of one table: columns are (model, dataset, metric), rows regularizers
(``none`` first), and each :class:`~ndebench.platform.report.render.sections.Cell` the "mean (std)" text over the
``ok`` seeds, the significance ``marker`` of the test against ``none``, whether it is the best of its column
(bold), a ``note`` (other n, diverged or errored runs, missing seeds) and a ``warning`` for a cell whose model did
not learn (:mod:`~ndebench.platform.report.learning`). :func:`study_sections` turns the tables, their effect
sizes and the across-dataset comparison into :class:`~ndebench.platform.report.render.sections.Section` objects
with captions that name the metric, n, the test, alpha and the correction; :func:`markdown` and :func:`latex`
write them with :mod:`~ndebench.platform.report.render.sections`' renderers, as ``report.html`` does.
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.common.labels import cell_label
from ndebench.platform.record.schema import LISTED_STATUSES
from ndebench.platform.report.render import latex as tex
from ndebench.platform.report.render.format import DIGITS, fmt, fmt_p, interval
from ndebench.platform.report.render.sections import Cell, Section, latex_escape, md_escape, to_latex, to_markdown
from ndebench.platform.report.statistics import significance, stats
from ndebench.platform.report.statistics.learned import FLAG, RULE
from ndebench.platform.report.statistics.rows import ROW, cell_columns, row_names, scopes
from ndebench.regularizers.none import BASELINE

LABELS = {"test_accuracy": "accuracy", "test_top5_accuracy": "top-5 accuracy", "test_auroc": "AUROC",
          "test_nll": "NLL", "test_ece": "ECE"}
TEST_NAMES = {
    "student": "Student's two-sample t-test (scipy.stats.ttest_ind, pooled variance)",
    "welch": "Welch's two-sample t-test (scipy.stats.ttest_ind, equal_var=False)",
    "paired": "paired t-test over the seeds both cells share (scipy.stats.ttest_rel)",
}
SHORT_TESTS = {"student": "Student's t-test", "welch": "Welch's t-test", "paired": "paired t-test"}


@dataclass
class Table:
    """Renderer-agnostic content of one table: ``columns`` are (model, dataset, metric), ``rows`` the rows' names
    and ``cells`` map (row, column index) to a :class:`~ndebench.platform.report.render.sections.Cell`; ``names``
    each row's printed name (:func:`~ndebench.platform.report.render.latex.printed_names`)."""

    title: str
    columns: list[tuple[str, str, str]]
    rows: list[str]
    cells: dict[tuple[str, int], Cell]
    usual_n: int
    test: str
    cell_stats: pd.DataFrame
    comparisons: pd.DataFrame
    protocols: dict[str, str]
    correction: str = "none"
    flagged: dict[tuple[str, str, str], str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, runs: pd.DataFrame, metrics: dict[str, str], title: str, test: str, alpha: float,
              correction: str = "none", coverage: pd.DataFrame | None = None,
              flagged: dict[tuple[str, str, str], str] | None = None) -> Table:
        """The table of ``metrics`` (dataset -> metric column) over the runs with a status in
        :data:`~ndebench.platform.record.schema.COUNTED_STATUSES`: cell means and stds
        (:func:`~ndebench.platform.report.statistics.stats.summarize_cells`), ``test`` against ``none`` marked at
        ``alpha`` after ``correction``, the notes of ``coverage``
        (:func:`~ndebench.platform.report.statistics.coverage.seed_coverage`) and the cells in ``flagged``
        (``(model, dataset, regularizer)`` -> why, :func:`~ndebench.platform.report.learning.flags`) marked "did not
        learn"."""
        flagged = flagged or {}
        summaries, comparisons = [], []
        for metric in sorted(set(metrics.values())):
            part = runs[runs["dataset"].isin([d for d, m in metrics.items() if m == metric])]
            summaries.append(stats.summarize_cells(part, metric))
            comparisons.append(stats.compare_to_baseline(part, metric, test=test, alpha=alpha))
        cell_stats = pd.concat(summaries, ignore_index=True)
        comparison = pd.concat(comparisons, ignore_index=True)
        comparison["p_holm"] = significance.adjust(comparison["p"].to_numpy(float), stats.CORRECTION, alpha)
        comparison = significance.mark(comparison, alpha, correction)
        columns = [(m, d, metrics[d]) for m, d in
                   runs[["model", "dataset"]].drop_duplicates().sort_values(["model", "dataset"])
                   .itertuples(index=False)]
        rows = regularizer_order(runs)
        ok_n = cell_stats.loc[cell_stats["n"] > 0, "n"]
        usual_n = int(ok_n.mode().max()) if len(ok_n) else 0
        by_cell = _records(cell_stats)
        tests = _records(comparison)
        gaps = {} if coverage is None else {tuple(k): n for k, n in zip(
            coverage[stats.CELL].itertuples(index=False, name=None), coverage["note"], strict=True) if n}
        cells = {}
        for j, (model, dataset, metric) in enumerate(columns):
            for regularizer in rows:
                key = (model, dataset, regularizer)
                if key in by_cell:
                    cells[(regularizer, j)] = _cell(by_cell[key], tests.get(key), usual_n, gaps.get(key, ""))
                    cells[(regularizer, j)].warning = FLAG if key in flagged else ""
                elif key in gaps:
                    cells[(regularizer, j)] = Cell("–", note=gaps[key])
            _bold_best(cells, j, rows, by_cell, model, dataset, metric)
        protocols = {}
        if "test_protocol" in runs.columns:
            named = runs[runs["test_protocol"].notna() & (runs["test_protocol"].astype(str) != "")]
            protocols = {r: ", ".join(sorted(set(g["test_protocol"].astype(str))))
                         for r, g in named.groupby(row_names(named))}
        return cls(title, columns, rows, cells, usual_n, test, cell_stats, comparison, protocols, correction,
                   {k: v for k, v in flagged.items() if k in by_cell}, tex.printed_names(runs))

    def metric_label(self) -> str:
        """The table's metrics as a reader names them (``accuracy``, ``accuracy / AUROC``)."""
        return " / ".join(LABELS.get(m, m) for m in self.metric_names())

    def metric_names(self) -> list[str]:
        """The distinct metric columns of the table, sorted."""
        return sorted({m for _, _, m in self.columns})


def table_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (a study frame, :func:`~ndebench.platform.record.runs.study_frame`) with the column the report keys
    its rows on, :data:`~ndebench.platform.report.statistics.rows.ROW`: each run's cell name, its ``label`` (made by
    the record from the values the cell fixes and the run's ``scope``,
    :func:`~ndebench.platform.common.labels.cell_label`), so that each fixed-parameter variant is a row of its own
    and a ``scope: time`` cell is never named as the paper's method; ``regularizer`` stays each run's. A frame
    without ``label`` names a run by its ``variant``, else by :func:`~ndebench.platform.common.labels.cell_label` of
    its regularizer and its ``params.regularizer.scope``; one with neither ``label`` nor ``variant`` is returned as
    it is: its rows are its regularizers."""
    if "label" in runs:
        return runs.assign(**{ROW: runs["label"]})
    if "variant" not in runs:
        return runs
    return runs.assign(**{ROW: [v if isinstance(v, str) and v else cell_label(r, {}, s)
                                for r, v, s in zip(runs["regularizer"], runs["variant"], scopes(runs), strict=True)]})


def regularizer_order(runs: pd.DataFrame) -> list[str]:
    """The rows of ``runs`` (:func:`~ndebench.platform.report.statistics.rows.row_names`): ``none`` first, then the
    others by name."""
    names = set(row_names(runs))
    return [BASELINE] * (BASELINE in names) + sorted(names - {BASELINE})


def _records(frame: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The rows of a per-cell frame by (model, dataset, regularizer): a dict lookup per cell, not an index search."""
    return dict(zip(frame[list(stats.CELL)].itertuples(index=False, name=None), frame.to_dict("records"), strict=True))


def _cell(row: dict[str, Any], comparison: dict[str, Any] | None, usual_n: int, gap: str = "") -> Cell:
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
    return Cell(text, marker=marker, note="; ".join(notes))


def _bold_best(cells: dict, j: int, rows: list[str], by_cell: dict[tuple[str, str, str], dict[str, Any]],
               model: str, dataset: str, metric: str) -> None:
    """Bold every cell of column ``j`` whose mean, rounded as displayed, is the best one."""
    means = {r: round(float(by_cell[(model, dataset, r)]["mean"]), DIGITS) for r in rows
             if (model, dataset, r) in by_cell and by_cell[(model, dataset, r)]["n"] > 0}
    if not means:
        return
    best = (max if stats.higher_is_better(metric) else min)(means.values())
    for r, value in means.items():
        if value == best:
            cells[(r, j)].bold = True


def caption(table: Table, alpha: float, tex: bool) -> str:
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
                  f"bold: best mean per column ({directions}). Each cell's p-value: \"{tests_title(table)}\"."
                  + _protocol_sentence(table) + _flag_sentence(table)))


def tests_title(table: Table) -> str:
    """The title of the section with the tests of ``table``'s cells against ``none``."""
    return "Tests against none" + ("" if table.title == "primary" else f": {table.title}")


def _flag_sentence(table: Table) -> str:
    if not table.flagged:
        return ""
    return f" \"{FLAG}\": {RULE}, so the cell shows a training failure, not a regularization effect."


def flagged_lines(table: Table) -> list[str]:
    """One Markdown line per cell of ``table`` that did not learn, with its test accuracy and chance level."""
    if not table.flagged:
        return []
    return ["## Cells that did not learn", ""] + [f"- {md_escape(' / '.join(k))}: {why}"
                                                  for k, why in sorted(table.flagged.items())] + [""]


def _protocol_sentence(table: Table) -> str:
    if not table.protocols:
        return ""
    return " Test-time protocol: " + "; ".join(f"{r}: {p}" for r, p in table.protocols.items()) + "."


def _model_width(columns: list[tuple[str, str, str]]) -> list[tuple[str, int]]:
    return [(model, len(list(group))) for model, group in itertools.groupby(c[0] for c in columns)]


def column_title(table: Table, dataset: str, metric: str) -> str:
    """The dataset, with its metric's label when the table mixes metrics (``Sepsis (AUROC)``)."""
    return f"{dataset} ({LABELS.get(metric, metric)})" if len(table.metric_names()) > 1 else dataset


# The report's own tables as sections -------------------------------------------------------------------

def status_line(runs: pd.DataFrame) -> str:
    """One sentence counting the runs by status (``ok``, ``diverged``, ``error`` first), with a hint when
    some are still ``running``."""
    counts = runs["status"].value_counts()
    others = sorted(set(counts.index) - set(LISTED_STATUSES))
    parts = [f"{int(counts.get(s, 0))} {s}" for s in (*LISTED_STATUSES, *others)]
    line = f"{len(runs)} evaluate-phase runs: " + ", ".join(parts) + "."
    if "running" in counts or "interrupted" in counts:
        line += (" Running and interrupted runs belong to a sweep in progress or one that was stopped "
                 "(`ndebench run --resume` finishes them); the tables cover the finished runs.")
    return line


def failed_lines(runs: pd.DataFrame, limit: int = 50) -> list[str]:
    """Markdown list of the runs that did not finish ok, with their messages."""
    failed = runs[runs["status"] != "ok"].sort_values([*cell_columns(runs), "seed"], kind="stable")
    if failed.empty:
        return []
    lines = ["## Runs that did not finish ok", ""]
    shown = failed.head(limit)
    for row, name in zip(shown.itertuples(index=False), row_names(shown), strict=True):
        message = str(getattr(row, "message", "") or "").replace("\n", " ")
        lines.append(f"- {md_escape(f'{row.model} / {row.dataset} / {name}')}, seed {row.seed}: "
                     f"{row.status}" + (f": {md_escape(message[:300])}" if message else ""))
    if len(failed) > limit:
        lines.append(f"- ... and {len(failed) - limit} more (see results.csv)")
    return lines + [""]


def _label(study: str, title: str) -> str:
    return "tab:" + re.sub(r"[^A-Za-z0-9]+", "-", f"{study}-{title}").strip("-").lower()


def table_section(study: str, table: Table, alpha: float) -> Section:
    """One per-study table: a row per regularizer, a column per (model, dataset) grouped by model."""
    rows = [[Cell(r)] + [table.cells.get((r, j)) or Cell("–") for j in range(len(table.columns))]
            for r in table.rows]
    text = caption(table, alpha, tex=False)
    return Section("Primary metric" if table.title == "primary" else table.title,
                   ["regularizer"] + [column_title(table, d, metric) for _, d, metric in table.columns], rows,
                   text.replace("\\*", "*"), align="l" + "r" * len(table.columns),
                   groups=_model_width(table.columns), label=_label(study, table.title),
                   tex_caption=caption(table, alpha, tex=True), md_caption=text,
                   short_caption=tex.significance_caption(table.metric_label(), table.usual_n, table.test,
                                                          table.correction, alpha))


ONE_DATASET = ("a (model, regularizer) that shares a single dataset with none has no comparison across datasets "
               "(a Wilcoxon test of one difference cannot reject); its test against none is in the tables above")


def across_section(study: str, across: pd.DataFrame, alpha: float) -> Section | None:
    """The across-dataset comparison (one row per model and regularizer with at least two datasets in common with
    ``none``), None when there is none."""
    single = int((across["n_datasets"] < 2).sum()) if len(across) else 0
    across = across[across["n_datasets"] >= 2] if len(across) else across
    if across.empty:
        return None
    rows = [[Cell(row.model), Cell(row.regularizer), Cell(str(row.n_datasets)), Cell(_improvement(row)),
             Cell(fmt(row.pct_change, 2, True)), Cell(f"{row.wins}/{row.n_datasets}"), Cell(fmt_p(row.p)),
             Cell(fmt_p(row.p_holm))] for row in across.itertuples(index=False)]
    return Section("Across datasets", ["model", "regularizer", "datasets", "mean improvement (SE) [95% CI]",
                                       "% change", "wins", "Wilcoxon p", "Holm p"], rows, _across_caption(alpha),
                   notes=sorted({n for n in across["note"] if n}) + ([f"{single} row(s) left out: {ONE_DATASET}."]
                                                                     if single else []),
                   align="llrrrrrr", label=_label(study, "across"),
                   short_caption=f"Across datasets: Wilcoxon signed-rank test, Holm-corrected, $\\alpha = {alpha:g}$")


def effects_section(study: str, table: Table, alpha: float) -> Section | None:
    """The test of every cell of ``table`` against ``none``, with its effect sizes; None when it has none."""
    rows = effect_rows(table)
    if not rows:
        return None
    align = "lllr" + "r" * (len(rows[0]) - 4)
    return Section(tests_title(table), effect_header(table), [[Cell(x) for x in row] for row in rows],
                   effects_caption(table), align=align, label=_label(study, f"effects {table.title}"),
                   short_caption=f"Tests of {table.metric_label()} against none: {SHORT_TESTS[table.test]}, "
                                 + ("uncorrected" if table.correction == "none" else f"{table.correction}-corrected")
                                 + f", $\\alpha = {alpha:g}$")


def study_sections(study: str, tables: list[Table], across: pd.DataFrame, alpha: float) -> list[Section]:
    """The sections of ``table.md``, ``table.tex`` and the top of ``report.html``: the tables, the test of every
    tested cell of each with its p-value and effect sizes, and the across-dataset comparison."""
    found = [table_section(study, t, alpha) for t in tables]
    found += [effects_section(study, t, alpha) for t in tables]
    return [s for s in [*found, across_section(study, across, alpha)] if s is not None]


def markdown(study: str, runs: pd.DataFrame, tables: list[Table], across: pd.DataFrame, alpha: float) -> str:
    """``table.md`` of a study: the run counts, each table with its caption, the cells that did not learn, the
    tests against none with their p-values and effect sizes, the across-dataset comparison and the runs that did
    not finish ok."""
    lines = [f"# Study {study}", "", status_line(runs), ""]
    lines += [line for t in tables for line in (to_markdown(table_section(study, t, alpha)).rstrip("\n"), "")]
    lines += flagged_lines(tables[0]) if tables else []
    lines += [line for t in tables if (effects := effects_section(study, t, alpha))
              for line in (to_markdown(effects).rstrip("\n"), "")]
    section = across_section(study, across, alpha)
    if section is None:
        why = "No regularizer shares a dataset with the baseline none." if across.empty else f"No table: {ONE_DATASET}."
        lines += ["## Across datasets", "", why, ""]
    else:
        notes = [""] + [f"- {n}" for n in section.notes] if section.notes else []
        lines += [to_markdown(replace(section, notes=[])).rstrip("\n"), *notes, ""]
    lines += failed_lines(runs)
    return "\n".join(lines).rstrip("\n") + "\n"


def _improvement(row: tuple) -> str:
    """"mean (SE) [low, high]" of an across-dataset row (the interval left out where undefined)."""
    return " ".join(x for x in (f"{fmt(row.mean_improvement, sign=True)} ({fmt(row.se)})",
                                interval(row.ci_low, row.ci_high)) if x)


def _across_caption(alpha: float) -> str:
    return ("Improvement over none on each dataset's primary metric (sign-adjusted so that positive is "
            "better), averaged over datasets with its standard error and 95% Student-t interval; % change is the "
            "mean of the per-dataset "
            "relative changes. Wilcoxon signed-rank test over datasets (scipy.stats.wilcoxon, two-sided), "
            f"Holm-corrected over all (model, regularizer) rows (statsmodels multipletests, method='holm'), "
            f"alpha = {alpha:g}.")


def latex(study: str, tables: list[Table], across: pd.DataFrame, alpha: float) -> str:
    """``table_full.tex`` of a study: a booktabs table per section of :func:`study_sections`, rows printed by name."""
    names = {row: name for table in tables for row, name in table.names.items()}
    return (f"% Study {study}: generated by ndebench. Needs \\usepackage{{booktabs}}.\n\n"
            + "\n".join(to_latex(s, names) for s in study_sections(study, tables, across, alpha)))


def _df(df: float) -> str:
    return "n/a" if not math.isfinite(df) else (str(int(df)) if float(df).is_integer() else f"{df:.1f}")


def effect_rows(table: Table) -> list[list[str]]:
    """Per comparison of ``table`` with ``none``: model, dataset, regularizer, n vs n_baseline, the raw
    difference with its 95% interval, the test's t with its degrees of freedom, its two-sided p (and the p after
    the table's correction, when there is one) and Hedges' g with its interval."""
    rows = []
    for c in table.comparisons.sort_values(stats.CELL).itertuples(index=False):
        adjusted = [fmt_p(c.p_adjusted)] if table.correction != "none" else []
        rows.append([c.model, c.dataset, c.regularizer, f"{c.n} vs {c.n_baseline}",
                     f"{fmt(c.difference, sign=True)} {interval(c.diff_ci_low, c.diff_ci_high)}".strip(),
                     f"{fmt(c.t, 2, True)} ({_df(c.df)})", fmt_p(c.p), *adjusted,
                     f"{fmt(c.hedges_g, 2, True)} {interval(c.hedges_g_ci_low, c.hedges_g_ci_high, 2)}".strip()])
    return rows


def effect_header(table: Table) -> list[str]:
    """The columns of :func:`effect_rows`."""
    adjusted = [f"p ({table.correction})"] if table.correction != "none" else []
    return ["model", "dataset", "regularizer", "n", "difference [95% CI]", "t (df)", "p", *adjusted,
            "Hedges' g [95% CI]"]


def effects_caption(table: Table) -> str:
    """What the test table shows, naming the test behind its p-values and intervals."""
    metric = ("the primary metric" if table.title == "primary"
              else " / ".join(LABELS.get(m, m) for m in table.metric_names()))
    adjusted = (f"; p ({table.correction}): after the table's {table.correction} correction, which the markers "
                "use" if table.correction != "none" else "")
    return (f"Each regularizer against {BASELINE} within its model and dataset on {metric}: the two-sided "
            f"{TEST_NAMES[table.test]}, its t (degrees of freedom) and p-value{adjusted}. "
            f"Difference = regularizer mean minus {BASELINE} mean (raw: for NLL and "
            f"ECE a negative difference is better), with the 95% confidence interval of the same test. "
            "Hedges' g: the difference in standard deviations (pooled for Student, "
            "the average variance for Welch, the paired differences' for paired) times the small-sample "
            "correction, with the normal-approximation 95% interval of Hedges & Olkin (1985).")
