"""One study's report end to end: what ``ndebench report`` (and ``ndebench run`` after its sweep) writes.

:func:`report_study` reads the study's runs from MLflow (:mod:`~ndebench.platform.record.runs`), writes the tables
(:func:`~ndebench.platform.report.report.build_report`), the failed cells, the further analyses and ``report.html``
(:func:`~ndebench.platform.report.analyses.write_analyses`), and logs every file to the study's MLflow run.
:func:`report` does the same from a results frame already read.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from ndebench.platform.common.choices import default_test
from ndebench.platform.record import tracking
from ndebench.platform.record.completeness import left_out_finished
from ndebench.platform.record.runs import planned_seeds as recorded_seeds
from ndebench.platform.record.runs import runs_frame, study_frame
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import search
from ndebench.platform.report.analyses import write_analyses
from ndebench.platform.report.integrity import integrity_warning, report_check
from ndebench.platform.report.learning import curve_runs, learning_check, read_curves
from ndebench.platform.report.render.drawing import figure_mode, pair_count
from ndebench.platform.report.render.sections import Cell, Section, to_latex, to_markdown
from ndebench.platform.report.render.tables import table_rows
from ndebench.platform.report.report import ReportFiles, build_report, format_console_table, has_results

SENTENCES = {
    ("paper", "shared"): "protocol paper, base.scope shared (the paper's): each (model, dataset)'s model and training "
                         "hyperparameters were searched on none and frozen for every regularizer's row",
    ("paper", "per_regularizer"): "protocol paper, base.scope per_regularizer (ndebench's extension): each "
                                  "regularizer's row uses model and training hyperparameters searched with that "
                                  "regularizer on at its grid's middle point",
    ("joint", "shared"): "protocol joint: each row searched its model, training and regularizer hyperparameters "
                         "together",
}
VARIANTS = "variant rows (labels with [...]) fix the values in their label and take the rest from their base"
PAIRED_BY_DESIGN = ("Tests: the paired t-test, the default under the paper protocol, whose seed fixes the data split "
                    "and the initialisation in every cell, so a cell's runs pair with none's by seed; a cell missing "
                    "some of none's seeds is tested on the seeds it shares with none (its pairs are its n). "
                    "`--test student` gives the paper's unpaired test.")


def protocol_note(params: dict[str, Any]) -> dict[str, str]:
    """``summary.json``'s ``protocol`` from the study run's params (``protocol``, ``base.scope``; a study recorded
    before ``base.scope`` existed had the shared base): the settings and the sentence ``table.md`` shows."""
    protocol = str(params.get("protocol") or "paper")
    scope = str(params.get("base.scope") or "shared") if protocol == "paper" else "shared"
    sentence = SENTENCES.get((protocol, scope), f"protocol {protocol}, base.scope {scope}")
    return {"protocol": protocol, "base_scope": scope, "rows": f"Rows: {sentence}; {VARIANTS}."}


def design_test(test: str | None, protocol: dict[str, str] | None) -> tuple[str, dict[str, str] | None]:
    """The report's test and its ``protocol`` note: ``test`` when given; else ``paired`` under the paper protocol
    (a seed fixes the split and the initialisation in every cell, so the difference of a cell and ``none`` is
    taken per seed, ``scipy.stats.ttest_rel`` over the seeds they share), with the note's ``tests`` saying so;
    else Student's unpaired test (a study with no recorded protocol, e.g. a frame without a store)."""
    if test is not None:
        return test, protocol
    if protocol is not None and default_test(protocol["protocol"]) == "paired":
        return "paired", protocol | {"tests": PAIRED_BY_DESIGN}
    return "student", protocol


@dataclass(frozen=True)
class Report:
    """What :func:`report` returns: the written ``files`` (``files.directory``, ``files.paths``), the
    Markdown (``table.md``) and LaTeX (``table.tex``) text of the tables, the ``console`` summary that
    ``ndebench report`` prints (per cell n, mean, std and the test against ``none``), and ``paths``, every file
    written (the analyses and ``report.html`` too, when reported from a tracking store)."""

    files: ReportFiles
    markdown: str
    latex: str
    console: str
    paths: tuple[Path, ...] = ()


def report(runs: pd.DataFrame, out_dir: str | Path = "reports", study: str | None = None, *,
           test: str | None = None, alpha: float = 0.05, correction: str = "none", metric: str | None = None,
           planned_seeds: list[int] | None = None, curves: pd.DataFrame | None = None, uri: str | None = None,
           frame: pd.DataFrame | None = None, failed: Mapping[str, str] | None = None,
           figures: str = "auto", left_out: list[dict[str, Any]] | None = None, paper: bool = False,
           protocol: dict[str, str] | None = None, changed: list[dict[str, Any]] | None = None,
           noted: str | None = None) -> Report:
    """The report of ``study`` (default: the one study in ``runs["study"]``) from a results frame
    (:func:`~ndebench.platform.record.runs.study_frame`, as ``api.results`` returns it, its rows named by ``label``
    (:func:`~ndebench.platform.report.analyses.table_rows`); or any frame with the columns ``model, dataset,
    regularizer, seed, status`` and ``test_*``), written to ``out_dir/<study>/`` by
    :func:`~ndebench.platform.report.report.build_report` (see it for the statistics: mean (sample std) over
    seeds, two-sided ``test`` against ``none`` at ``alpha`` with ``correction``, the primary ``metric`` of each
    dataset unless one is given; ``test`` None: :func:`design_test`, the paired test under the paper protocol, else
    Student's); cells name the
    ``planned_seeds`` without a run, default every seed recorded; cells that did not learn are flagged, and
    ``curves``, e.g. ``learning.read_curves(tracking.client(uri), list(runs.run_id))``, adds the learning-curve
    figures; ``figures`` (``auto``, ``all``, ``summary``, ``none``) chooses which figures are drawn,
    :mod:`~ndebench.platform.report.render.drawing`). The ``failed`` cells (label -> first error) are a section
    of ``table.md`` and ``table.tex`` (:func:`failed_section`).

    With ``uri``, the tracking store the runs are in, it is everything ``ndebench report`` does: the planned seeds
    and (unless given) the learning curves read from there, of one seed per cell of the pairs whose figures are
    drawn (:func:`~ndebench.platform.report.learning.curve_runs`), the finished runs left out as duplicates in
    ``table.md``, the paper's further analyses and ``report.html`` from ``frame`` (default: the study frame
    with its times, :func:`~ndebench.platform.record.runs.study_frame`), and every file logged as an artifact of
    the study's MLflow run; ``left_out``
    (:func:`~ndebench.platform.record.completeness.left_out_finished`) and
    ``changed`` (:func:`~ndebench.platform.report.integrity.changed_runs`) and ``noted`` (the study's
    :func:`~ndebench.platform.report.integrity.fingerprint`, named in ``table.md`` and ``report.html``) spare
    reading the study's runs again; the ``console`` opens with the warning of ``table.md`` when runs changed.
    ``paper``: the study beside the Continuum Dropout paper's reported numbers
    (:mod:`~ndebench.platform.report.paper.comparison`), in ``table.md``, ``report.html`` and ``summary.json``;
    ``protocol`` (:func:`protocol_note`, read from the study run with ``uri``)
    says which protocol produced the rows."""
    if study is None:
        names = sorted(set(runs["study"])) if "study" in runs.columns else []
        if len(names) != 1:
            raise ValueError(f"name the study to report; the runs hold {names or 'no study column'}")
        study = names[0]
    named = table_rows(runs)
    if uri is not None:
        frame = study_frame(uri, study, histories=True) if frame is None else frame
        planned_seeds = recorded_seeds(uri, study) if planned_seeds is None else planned_seeds
        mode, _ = figure_mode(figures, pair_count(named))
        if curves is None and mode != "none":
            chosen = curve_runs(named, learning_check(named), flagged_only=mode == "summary")
            curves = read_curves(tracking.client(uri), chosen)
        left_out = left_out_finished(uri, study) if left_out is None else left_out
        if changed is None or noted is None:
            flagged, fingerprint = report_check(uri, study, search(uri, study))
            changed = flagged if changed is None else changed
            noted = fingerprint if noted is None else noted
        protocol = study_protocol(uri, study) if protocol is None else protocol
    test, protocol = design_test(test, protocol)
    files = build_report(runs, Path(out_dir), study, metric=metric, test=test, alpha=alpha,
                         correction=correction, planned_seeds=planned_seeds, curves=curves, left_out=left_out,
                         figures=figures, paper=paper, protocol=protocol, changed=changed, fingerprint=noted)
    mine = named[named["study"] == study] if "study" in named.columns else named
    console = format_console_table(mine, metric=metric, test=test, alpha=alpha, correction=correction,
                                   table=files.tables[0] if files.tables else None)
    console = f"{integrity_warning(list(files.changed))}\n{console}" if files.changed else console
    if failed:
        section = failed_section(failed)
        for path, text in ((files.table_md, "\n" + to_markdown(section)), (files.table_tex, "\n" + to_latex(section))):
            with path.open("a") as handle:
                handle.write(text)
    paths = list(files.paths)
    if uri is not None:
        paths += _analyses(named, files, study, uri, frame, alpha)
    return Report(files, files.table_md.read_text(), files.table_tex.read_text(), console, tuple(paths))



def failed_section(failed: Mapping[str, str]) -> Section:
    """The cells the sweep recorded as failed (label -> its first error), one row each."""
    return Section("Failed cells", ["cell", "first error"],
                   [[Cell(label), Cell(message)] for label, message in failed.items()],
                   "Cells with no ok run, each with its first error; `ndebench run ... --resume` runs them again.")


def study_protocol(uri: str, study: str) -> dict[str, str] | None:
    """The protocol settings of the study run (``ndebench.kind=study``), None when there is none."""
    found = tracking.search(uri, study, "tags.`ndebench.kind` = 'study'")
    return protocol_note(found[0].data.params) if found else None


def _analyses(runs: pd.DataFrame, files: ReportFiles, study: str, uri: str, frame: pd.DataFrame | None,
              alpha: float) -> list[Path]:
    """The further analyses and ``report.html`` (when any run has results), then every file logged to MLflow."""
    paths: list[Path] = []
    if has_results(runs):
        experiment = tracking.client(uri).get_experiment_by_name(study)
        paths += write_analyses(
            frame, runs, files, study, alpha=alpha,
            reevaluated=runs_frame(uri, study, "reevaluate", histories=False),
            experiment_id=experiment.experiment_id if experiment else None, **report_ui(uri))
    tracking.log_report_artifacts(uri, study, [*files.paths, *paths])
    return paths


def report_ui(uri: str) -> dict[str, str]:
    """Where ``report.html`` links a run to: the tracking server at an ``http(s)`` ``uri`` serves the UI itself;
    any other store (sqlite) is served by ``ndebench ui --tracking-uri <uri>``, at its default address, which a
    note in the report says. ``{"ui_url": ..., "ui_note": ...}``."""
    if uri.startswith(("http://", "https://")):
        return {"ui_url": uri.rstrip("/"), "ui_note": ""}
    return {"ui_url": "http://127.0.0.1:5000",
            "ui_note": f"start that UI with `ndebench ui --tracking-uri {uri}` (its default address)"}


def report_study(study: str, uri: str, out_dir: str | Path = "reports", *, test: str | None, alpha: float,
                 correction: str, figures: str, failed: Mapping[str, str] | None = None,
                 paper: bool = False) -> Report | None:
    """``ndebench report --study``: the study's frame (:func:`~ndebench.platform.record.runs.study_frame`, with
    its times) read from ``uri`` (absolute, the study in it), reported by :func:`report` with everything the
    command writes (``test`` None: :func:`design_test`). ``None`` when no evaluate run finished and cells
    ``failed``; ``ValueError`` when the study's evaluate runs are missing."""
    # Every run of the study, read once: the report counts its evaluate runs and checks all of them (a run whose
    # phase and kind were removed is named, not lost).
    everything = search(uri, study)
    found = [r for r in everything if r.data.tags.get(f"{TAG}phase") == "evaluate"]
    runs = study_frame(uri, study, histories=True, runs=found)
    if runs.empty and failed:
        return None
    if runs.empty:
        raise ValueError(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    left_out = left_out_finished(uri, study, found)
    changed, noted = report_check(uri, study, everything)
    # Millions of MLflow entities would make every later garbage collection (statsmodels runs some) slow.
    del found, everything
    return report(runs, out_dir, study, test=test, alpha=alpha, correction=correction, uri=uri, frame=runs,
                  failed=failed, figures=figures, left_out=left_out, paper=paper, changed=changed, noted=noted)
