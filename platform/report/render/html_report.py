"""``report.html``: one page per study (tables, captions, figures, run counts and the MLflow run ids of every
cell), openable from disk or from the MLflow UI's artifact view.

The summary (tables, notes, per-model figures) comes first; per-(model, dataset) figures, the analyses'
sections and the run table are collapsed ``<details>`` where there are many. Figures are inlined as base64
PNG up to :data:`INLINE_BYTES` in all, so that a small study's page is self-contained; past that they are
linked by file name (``src="seeds_....png"``), which works beside the files of the report folder.
"""
from __future__ import annotations

import base64
import html
from collections import Counter
from pathlib import Path

import pandas as pd
from ndebench.platform.record.uiview import MODEL_TRAINING
from ndebench.platform.report.render import sections
from ndebench.platform.report.render.sections import Section
from ndebench.platform.report.statistics.rows import cell_columns

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}
th:first-child,td:first-child{text-align:left}
caption{caption-side:bottom;text-align:left;font-size:0.85em;color:#555;padding-top:0.4em}
td.flag,b.flag{color:#c00}
figure{display:inline-block;margin:0.5em}
details{margin:0.5em 0}summary{cursor:pointer;font-weight:600}
img{max-width:560px}
code{font-size:0.85em}
"""
INLINE_BYTES = 8 * 1024**2
OPEN_UP_TO = 8
PAIR_PREFIXES = ("reliability_", "seeds_", "learning_")


def data_uri(path: Path) -> str:
    """``data:image/png;base64,...`` of a PNG file."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def image_sources(paths: list[Path], budget: int = INLINE_BYTES) -> dict[Path, str]:
    """``src`` of each PNG in ``paths``: its data URI while the inlined bytes stay within ``budget``, after
    that its file name (the page lies in the same folder)."""
    sources, used = {}, 0
    for path in paths:
        if path.suffix != ".png" or path in sources:
            continue
        size = path.stat().st_size
        if used + size <= budget:
            sources[path], used = data_uri(path), used + size
        else:
            sources[path] = html.escape(path.name)
    return sources


def _figure(path: Path, src: str) -> str:
    return (f'<figure><img src="{src}" alt="{html.escape(path.stem)}" loading="lazy"><figcaption>'
            f"{html.escape(path.name)}</figcaption></figure>")


def collapsed(summary: str, body: str, count: int) -> str:
    """``body`` in a ``<details>`` titled ``summary``, open when it holds at most :data:`OPEN_UP_TO` items."""
    return f"<details{' open' if count <= OPEN_UP_TO else ''}><summary>{html.escape(summary)}</summary>{body}</details>"


def figures_section(figures: list[Path], images: dict[Path, str]) -> str:
    """Per-model figures first, then one collapsed group per (model, dataset) pair."""
    shown = [p for p in figures if p in images]
    pairs: dict[str, list[Path]] = {}
    for path in shown:
        if path.stem.startswith(PAIR_PREFIXES):
            pairs.setdefault(path.stem.split("_", 1)[1], []).append(path)
    top = "".join(_figure(p, images[p]) for p in shown if not p.stem.startswith(PAIR_PREFIXES))
    groups = "".join(collapsed(key.replace("_", " on ", 1), "".join(_figure(p, images[p]) for p in group), len(pairs))
                     for key, group in pairs.items())
    return f"<section><h2>Figures</h2>{top}{groups}</section>"


def runs_section(runs: pd.DataFrame, ui_url: str | None, experiment_id: str | None, ui_note: str = "") -> str:
    """Run counts per cell (:func:`~ndebench.platform.report.statistics.rows.cell_columns`) by status and the
    MLflow run id of every run (a link when the UI's URL is known, to the UI's model-training pages, not MLflow
    3.17's default GenAI ones; ``ui_note`` says how to serve that UI)."""
    def link(run_id: str) -> str:
        if ui_url and experiment_id:
            return (f'<a href="{html.escape(ui_url)}/#/experiments/{experiment_id}/runs/{run_id}'
                    f'?workflowType={MODEL_TRAINING}">'
                    f'<code>{run_id}</code></a>')
        return f"<code>{html.escape(run_id)}</code>"

    # Plain lists, not a frame per cell: at thousands of cells pandas' per-group slicing cost seconds.
    ids_known = "run_id" in runs
    columns = [*cell_columns(runs), "status", *(["seed", "run_id"] if ids_known else [])]
    cells: dict[tuple[str, str, str], list[tuple]] = {}
    for model, dataset, regularizer, *rest in zip(*(runs[c].tolist() for c in columns), strict=True):
        cells.setdefault((model, dataset, regularizer), []).append(tuple(rest))
    rows = []
    for (model, dataset, regularizer), members in sorted(cells.items()):
        counts = ", ".join(f"{n} {s}" for s, n in sorted(Counter(m[0] for m in members).items()))
        ids = " ".join(link(str(m[2])) for m in sorted(members, key=lambda m: m[1])) if ids_known else ""
        rows.append(f"<tr><td>{html.escape(model)}</td><td>{html.escape(dataset)}</td>"
                    f"<td>{html.escape(regularizer)}</td><td>{counts}</td><td style='text-align:left'>{ids}</td></tr>")
    where = (f"links open the MLflow UI at <code>{html.escape(ui_url)}</code>" if ui_url and experiment_id
             else "open them with <code>ndebench ui</code>")
    where += f"; {html.escape(ui_note)}" if ui_note else ""
    table = (f"<table><caption>Evaluate-phase runs per cell by status, with their MLflow run ids ({where})."
             "</caption><thead><tr><th>model</th><th>dataset</th>"
             "<th>regularizer</th><th>runs</th><th>MLflow run ids (by seed)</th></tr></thead><tbody>"
             + "".join(rows) + "</tbody></table>")
    return f"<section><h2>Runs</h2>{collapsed(f'{len(rows)} cells', table, len(rows) // 10)}</section>"


def write_html(path: Path, study: str, runs: pd.DataFrame, shown: list[Section], notes: list[str],
               figures: list[Path], groups: dict[str, list[Section]], *, ui_url: str | None = None,
               experiment_id: str | None = None, ui_note: str = "") -> Path:
    """Write ``report.html``: the study's tables (``shown``, the sections of ``table.md``:
    :func:`~ndebench.platform.report.render.tables.study_sections`), ``notes``
    (e.g. why a critical-difference diagram is missing), its ``figures`` (PNG, :func:`image_sources`), every
    section of ``groups`` (heading -> sections) and the run table."""
    counts = runs["status"].value_counts()
    images = image_sources([*figures, *(p for group in groups.values() for s in group for p in s.figures)])
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ndebench report: "
             f"{html.escape(study)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Study {html.escape(study)}</h1>",
             f"<p>{len(runs)} evaluate-phase runs: "
             + ", ".join(f"{int(n)} {html.escape(str(s))}" for s, n in counts.items())
             + ".</p>"]
    parts += [sections.to_html(s, images) for s in shown]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    if figures:
        parts.append(figures_section(figures, images))
    for heading, group in groups.items():
        if group:
            parts.append(f"<h1>{html.escape(heading)}</h1>" + collapsed(
                f"{len(group)} section(s)", "".join(sections.to_html(s, images) for s in group), len(group)))
    parts += [runs_section(runs, ui_url, experiment_id, ui_note), "</body></html>"]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
