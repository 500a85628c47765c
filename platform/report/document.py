"""The files of a study's report besides its figures: ``table.md`` and ``table.tex`` from one ordered list of parts,
``summary.json`` and ``results.csv``, each written once.

``table.md`` is :data:`Part` s in the order :func:`~ndebench.platform.report.report.build_report` lists them: a
:class:`~ndebench.platform.report.render.sections.Section` (an analysis' table, rendered by
:func:`~ndebench.platform.report.render.sections.to_markdown`) or a Markdown text (the run counts and the main
tables, the notes of the gates, the figures and the protocol, the left-out and changed runs). ``table.tex`` holds the
main tables' sections and the failed cells. A study none of whose runs has a result gets :func:`no_results_parts`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.record.runs import whole_settings
from ndebench.platform.report.render.sections import Cell, Section, md_escape, to_latex, to_markdown
from ndebench.platform.report.render.tables import failed_lines, status_line
from ndebench.platform.report.statistics.rows import ROW

Part = Section | str
NO_RESULTS = "No evaluate-phase run finished ok with a test metric, so there is no table."


def failed_section(failed: Mapping[str, str]) -> Section:
    """The cells the sweep recorded as failed (label -> its first error), one row each."""
    return Section("Failed cells", ["cell", "first error"],
                   [[Cell(label), Cell(message)] for label, message in failed.items()],
                   "Cells with no ok run, each with its first error; `ndebench run ... --resume` runs them again.")


def write_tables(directory: Path, parts: list[Part | None], tex: str,
                 failed: Mapping[str, str] | None) -> tuple[Path, Path]:
    """Write ``table.md`` (``parts`` in order, None left out, then the ``failed`` cells) and ``table.tex`` (``tex``,
    the main tables' LaTeX, then the failed cells); return both paths."""
    after = [failed_section(failed)] if failed else []
    table_md, table_tex = directory / "table.md", directory / "table.tex"
    table_md.write_text("".join(part if isinstance(part, str) else "\n" + to_markdown(part)
                                for part in [*parts, *after] if part is not None))
    table_tex.write_text(tex + "".join("\n" + to_latex(s) for s in after))
    return table_md, table_tex


def no_results_text(runs: pd.DataFrame, study: str, coverage: pd.DataFrame) -> str:
    """``table.md``'s body for a study none of whose runs finished ok with a metric: counts, gaps and messages."""
    lines = [f"# Study {study}", "", status_line(runs), "", NO_RESULTS, ""]
    gaps = coverage[coverage["note"] != ""]
    if not gaps.empty:
        lines += ["## Incomplete cells", ""] + [f"- {md_escape(f'{r.model} / {r.dataset} / {r.regularizer}')}: "
                                                 f"{r.note}" for r in gaps.itertuples(index=False)] + [""]
    return "\n".join(lines + failed_lines(runs))


def written(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` as the report's files list them: each run's row (:data:`~ndebench.platform.report.statistics.rows.ROW`)
    under the header ``regularizer``, where ``results.csv`` and ``summary.json`` have always named a run's row (a
    ``results.csv`` read back is named by it)."""
    if ROW not in runs.columns:
        return runs
    in_place = [ROW if c == "regularizer" else c for c in runs.columns if c != ROW]
    return runs[in_place].rename(columns={ROW: "regularizer"})


def write_csv(runs: pd.DataFrame, directory: Path) -> Path:
    """``results.csv``: one row per run (:func:`written`; the calibration bins left out), whole-number settings as
    integers (:func:`~ndebench.platform.record.runs.whole_settings`)."""
    path = directory / "results.csv"
    whole_settings(written(runs).drop(columns="calibration", errors="ignore")).to_csv(path, index=False)
    return path


def write_json(summary: dict[str, Any], directory: Path) -> Path:
    """``summary.json``, JSON-safe (:func:`clean`)."""
    path = directory / "summary.json"
    path.write_text(json.dumps(clean(summary), indent=2, allow_nan=False))
    return path


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``frame`` as dicts, as ``summary.json`` lists them."""
    return frame.to_dict(orient="records")


def clean(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN and infinities to None."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
