"""One study's report end to end: what ``ndebench report`` (and ``ndebench run`` after its sweep) writes.

:func:`report_study` reads the study frame from MLflow (:mod:`~ndebench.platform.record.runs`) and :func:`report`
reports it with its :class:`ReportSettings`: what else it reads from the store (:func:`read_record`), the tables,
the failed cells and every analysis in them (:func:`~ndebench.platform.report.report.build_report`), the further
analyses' files and ``report.html`` (:func:`~ndebench.platform.report.analyses.write_analyses`), and every file logged
to the study's MLflow run.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from ndebench.platform.common.choices import default_test
from ndebench.platform.record import tracking
from ndebench.platform.record.completeness import left_out_finished
from ndebench.platform.record.runs import planned_seeds as recorded_seeds
from ndebench.platform.record.runs import runs_frame, study_frame
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.summaries import TIME_METRICS
from ndebench.platform.record.tracking import search
from ndebench.platform.report import learning
from ndebench.platform.report.analyses import write_analyses
from ndebench.platform.report.integrity import integrity_warning, report_check
from ndebench.platform.report.learning import curve_runs, read_curves
from ndebench.platform.report.render.drawing import figure_mode, pair_count
from ndebench.platform.report.render.tables import table_rows
from ndebench.platform.report.report import ReportFiles, build_report, format_console_table

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
class ReportSettings:
    """How a report tests and draws: ``test`` (None: :func:`design_test`), ``alpha``, ``correction``, ``metric`` (one
    primary metric for every dataset; None: each dataset's), ``figures`` (``auto``, ``all``, ``summary``, ``none``,
    :mod:`~ndebench.platform.report.render.drawing`), ``paper`` (the study beside the Continuum Dropout paper's
    numbers, :mod:`~ndebench.platform.report.paper.comparison`) and ``protocol`` (:func:`protocol_note`: which
    protocol produced the rows; read from the study run when the report reads a tracking store)."""

    test: str | None = None
    alpha: float = 0.05
    correction: str = "none"
    metric: str | None = None
    figures: str = "auto"
    paper: bool = False
    protocol: dict[str, str] | None = None


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


@dataclass(frozen=True)
class StudyRecord:
    """What a report reads from the tracking store beside the study frame: the ``planned_seeds``, the mean learning
    ``curves`` of the runs whose figures are drawn, the finished runs ``left_out``, the runs ``changed`` after they
    ended, the study's ``fingerprint``, its ``protocol``, its ``reevaluated`` runs and the ``check`` of which cells
    learned (:func:`~ndebench.platform.report.learning.learning_check`)."""

    planned_seeds: list[int] | None = None
    curves: pd.DataFrame | None = None
    left_out: list[dict[str, Any]] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    fingerprint: str | None = None
    protocol: dict[str, str] | None = None
    reevaluated: pd.DataFrame | None = None
    check: pd.DataFrame | None = None


def evaluate_runs(everything: list[Any]) -> list[Any]:
    """The evaluate-phase runs (trial and cell runs) among ``everything``, the study's runs."""
    return [r for r in everything if r.data.tags.get(f"{TAG}phase") == "evaluate"]


def read_record(uri: str, study: str, named: pd.DataFrame, settings: ReportSettings,
                everything: list[Any] | None = None) -> StudyRecord:
    """:class:`StudyRecord` of ``study`` at ``uri``, for a report of ``named`` (the study's runs, their rows named by
    :func:`~ndebench.platform.report.render.tables.table_rows`) with ``settings``; ``everything``:
    every run of the study (``tracking.search``) when already read, all of them checked
    (:func:`~ndebench.platform.report.integrity.report_check`). The learning curves are read for one seed per cell
    of the pairs whose figures are drawn
    (:func:`~ndebench.platform.report.learning.curve_runs`)."""
    everything = search(uri, study) if everything is None else everything
    found = evaluate_runs(everything)
    mode, _ = figure_mode(settings.figures, pair_count(named))
    check = learning.learning_check(named)
    curves = None
    if mode != "none":
        curves = read_curves(tracking.client(uri), curve_runs(named, check, flagged_only=mode == "summary"))
    return StudyRecord(recorded_seeds(uri, study), curves, left_out_finished(uri, study, found),
                       *report_check(uri, study, everything), settings.protocol or study_protocol(uri, study),
                       runs_frame(uri, study, "reevaluate", histories=False), check)


def report(frame: pd.DataFrame, out_dir: str | Path = "reports", study: str | None = None,
           settings: ReportSettings | None = None, *, uri: str | None = None, everything: list[Any] | None = None,
           failed: Mapping[str, str] | None = None) -> Report:
    """The report of ``study`` (default: the one study in ``frame["study"]``) from its study frame
    (:func:`~ndebench.platform.record.runs.study_frame`, as ``api.results`` returns it, its rows named by their
    ``label``, :func:`~ndebench.platform.report.render.tables.table_rows`; or any frame with the columns ``model,
    dataset, regularizer, seed, status`` and ``test_*``), written to ``out_dir/<study>/`` by
    :func:`~ndebench.platform.report.report.build_report` (see it for the statistics) with ``settings``
    (:class:`ReportSettings`); ``failed`` (label -> first error): the cells the sweep recorded as failed, the last
    section of ``table.md`` and ``table.tex``.

    With ``uri``, the tracking store the runs are in, it is everything ``ndebench report`` does: what the report
    reads beside the frame (:func:`read_record`; ``everything``, the study's runs when already read), the
    paper's further analyses and ``report.html`` (:func:`~ndebench.platform.report.analyses.write_analyses`; from
    the study frame with its times, read again when ``frame`` lacks them), and every file logged as an artifact of
    the study's MLflow run; the ``console`` opens with the warning of ``table.md`` when runs changed."""
    settings = settings or ReportSettings()
    if study is None:
        names = sorted(set(frame["study"])) if "study" in frame.columns else []
        if len(names) != 1:
            raise ValueError(f"name the study to report; the runs hold {names or 'no study column'}")
        study = names[0]
    if uri is not None and not set(TIME_METRICS) <= set(frame.columns):
        runs = None if everything is None else evaluate_runs(everything)
        frame = study_frame(uri, study, histories=True, runs=runs)
    named = table_rows(frame)
    mine = named[named["study"] == study] if "study" in named.columns else named
    record = read_record(uri, study, mine, settings, everything) if uri is not None else StudyRecord()
    test, protocol = design_test(settings.test, record.protocol or settings.protocol)
    files = build_report(frame, Path(out_dir), study, metric=settings.metric, test=test, alpha=settings.alpha,
                         correction=settings.correction, planned_seeds=record.planned_seeds, curves=record.curves,
                         left_out=record.left_out, figures=settings.figures, paper=settings.paper, protocol=protocol,
                         changed=record.changed, fingerprint=record.fingerprint, failed=failed, check=record.check)
    console = format_console_table(mine, metric=settings.metric, test=test, alpha=settings.alpha,
                                   correction=settings.correction, table=files.tables[0] if files.tables else None)
    console = f"{integrity_warning(list(files.changed))}\n{console}" if files.changed else console
    paths = list(files.paths)
    if uri is not None:
        paths += _analyses(frame, files, study, uri, settings.alpha, record.reevaluated)
    return Report(files, files.table_md.read_text(), files.table_tex.read_text(), console, tuple(paths))


def study_protocol(uri: str, study: str) -> dict[str, str] | None:
    """The protocol settings of the study run (``ndebench.kind=study``), None when there is none."""
    found = tracking.search(uri, study, "tags.`ndebench.kind` = 'study'")
    return protocol_note(found[0].data.params) if found else None


def _analyses(frame: pd.DataFrame, files: ReportFiles, study: str, uri: str, alpha: float,
              reevaluated: pd.DataFrame | None) -> list[Path]:
    """The further analyses and ``report.html`` (when any run has results), then every file logged to MLflow."""
    paths: list[Path] = []
    if files.tables:
        experiment = tracking.client(uri).get_experiment_by_name(study)
        paths += write_analyses(frame, files, study, alpha=alpha, reevaluated=reevaluated,
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
    runs = study_frame(uri, study, histories=True, runs=evaluate_runs(everything))
    if runs.empty and failed:
        return None
    if runs.empty:
        raise ValueError(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    settings = ReportSettings(test=test, alpha=alpha, correction=correction, figures=figures, paper=paper)
    return report(runs, out_dir, study, settings, uri=uri, everything=everything, failed=failed)
