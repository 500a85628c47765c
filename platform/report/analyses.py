"""The paper's further analyses of a study, beside the per-study tables of :mod:`report`, and ``report.html``.

Writes into the study's report folder: ``sensitivity.md/.tex`` with ``sensitivity_*.png/.pdf`` (Table 12,
Figs. 6-9, Tables 16-17), ``timing.md/.tex`` (Tables 7 and 15), ``summary_extended.md/.tex`` (Tables 9-11),
``mc_samples.md/.tex`` with ``mc_samples_*.png/.pdf`` (Tables 13-14, Fig. 4; only after ``ndebench
reevaluate``) and ``report.html``; each analysis is skipped, with a line in ``report.html``, when the study
has no runs it needs.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from ndebench.platform.record.schema import COUNTED_STATUSES
from ndebench.platform.report import architectures, audit, controls, mc_samples, report, sensitivity, summary, timing
from ndebench.platform.report.integrity import integrity_warning
from ndebench.platform.report.methods import sections as methods
from ndebench.platform.report.render import html_report, sections
from ndebench.platform.report.render.latex import printed_names
from ndebench.platform.report.render.tables import table_rows


def write_analyses(frame: pd.DataFrame, files: report.ReportFiles, study: str, *, alpha: float,
                   reevaluated: pd.DataFrame | None = None, channels: dict[str, int | None] | None = None,
                   ui_url: str | None = None, experiment_id: str | None = None, ui_note: str = "") -> list[Path]:
    """Write every analysis and ``report.html`` next to ``files`` (the output of :func:`report.build_report`
    on ``frame``; ``report.html`` renders its ``tables``, as ``table.md`` and ``table.tex`` do, and the selection
    audit and the MC control it computed); return the new paths, PDF copies of the report's figures included.

    ``frame`` is the study frame (:func:`~ndebench.platform.record.runs.study_frame`, with its times): its evaluate
    runs with parameters, the analyses that compare cells naming them as the tables do
    (:func:`~ndebench.platform.report.render.tables.table_rows`); ``reevaluated`` its reevaluate runs;
    ``channels`` maps datasets to input channels for the univariate / multivariate split (default: the UEA
    archive's table).
    """
    directory = files.directory
    frame = frame[frame["status"].isin(COUNTED_STATUSES)]
    reevaluated = reevaluated if reevaluated is not None and len(reevaluated) else None
    runs, primary = report.with_primary_metrics(table_rows(frame))
    names = printed_names(runs)
    frame = frame.reindex(columns=frame.columns.union(sorted(set(primary.values())), sort=False))
    matched = (architectures.matched_section(architectures.matched_comparisons(runs, primary, files.tables[0].test,
                                                                               alpha), alpha)
               if files.tables else None)
    groups = {
        "Sensitivity to the regularizer's parameters": ("sensitivity", "no fixed-parameter variant cells",
                                                        sensitivity.sensitivity_sections(frame, primary, directory)),
        "Compute time": ("timing", "no continuum_dropout runs with timings", timing.time_sections(frame)),
        "Extended summary over datasets": ("summary_extended", "no regularizer shares datasets with none",
                                           summary.summary_sections(runs, primary, alpha, channels)),
        "Many methods over many sets": ("methods", methods.SKIPPED,
                                        methods.methods_sections(runs, primary, files.tables[0].test, alpha, directory)
                                        if files.tables else []),
        "Selection audit": ("selection_audit", audit.SKIPPED, list(files.audit)),
        "Dropout vs ensembling": ("mc_control", controls.SKIPPED, list(files.control)),
        "Against none of the same architecture": ("architectures", architectures.SKIPPED,
                                                  [] if matched is None else [matched]),
        "The paper's numbers beside the study": ("paper_comparison", "not asked for; `ndebench report --paper`",
                                                 list(files.paper)),
        "Monte-Carlo samples at test time": (
            "mc_samples", "no reevaluate runs; run `ndebench reevaluate`",
            [] if reevaluated is None else
            mc_samples.mc_sections(reevaluated[reevaluated["status"] == "ok"], frame, directory)),
    }
    missing, written = [], []
    for heading, (stem, why, found) in groups.items():
        if not found:
            missing.append(f"{heading}: not in this report ({why}).")
        written += sections.write(found, directory, stem, f"{heading}: study {study}", names)
        written += [p for s in found for p in s.figures]
    notes = [integrity_warning(list(files.changed))] if files.changed else []
    notes += [files.fingerprint] if files.fingerprint else []
    # The same sections as table.md and table.tex, seed coverage and learning flags included.
    written.append(html_report.write_html(directory / "report.html", study, runs, list(files.shown),
                                          notes + list(files.notes) + missing, list(files.figures),
                                          {h: found for h, (_, _, found) in groups.items()},
                                          ui_url=ui_url, experiment_id=experiment_id, ui_note=ui_note))
    written += [p.with_suffix(".pdf") for p in files.figures if p.with_suffix(".pdf").exists()]
    return written
