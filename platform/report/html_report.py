"""``report.html``: one self-contained page per study (tables, captions, figures inlined as base64 PNG, run
counts and the MLflow run ids of every cell), openable from disk or from the MLflow UI's artifact view."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd
from ndebench.platform.report import sections, tables
from ndebench.platform.report.sections import Section

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:right}
th:first-child,td:first-child{text-align:left}
caption{caption-side:bottom;text-align:left;font-size:0.85em;color:#555;padding-top:0.4em}
td.flag,b.flag{color:#c00}
figure{display:inline-block;margin:0.5em}
img{max-width:560px}
code{font-size:0.85em}
"""


def data_uri(path: Path) -> str:
    """``data:image/png;base64,...`` of a PNG file."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def main_table_section(table: tables.Table, alpha: float) -> str:
    """One of the per-study tables of :func:`~ndebench.platform.report.report.build_report` as HTML."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in
                   ["regularizer"] + [f"{m} / {tables.column_title(table, d, metric)}"
                                      for m, d, metric in table.columns])
    body = []
    for r in table.rows:
        cells = [f"<td>{html.escape(r)}</td>"]
        for j in range(len(table.columns)):
            cell = table.cells.get((r, j))
            if cell is None:
                cells.append("<td>–</td>")
                continue
            text = html.escape(cell.text)
            text = (f"<b>{text}</b>" if cell.bold else text) + html.escape(cell.marker)
            cells.append(f"<td>{text}" + (f" <small>[{html.escape(cell.note)}]</small>" if cell.note else "")
                         + (f" <b class='flag'>{html.escape(cell.flag)}</b>" if cell.flag else "") + "</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    caption = tables.caption(table, alpha, tex=False).replace("\\*", "*")
    title = "Primary metric" if table.title == "primary" else table.title
    return (f"<section><h2>{html.escape(title)}</h2><table><caption>{html.escape(caption)}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></section>")


def effects_section(table: tables.Table) -> str:
    """The effect sizes of ``table``'s comparisons with ``none`` (difference and Hedges' g with 95% intervals)."""
    rows = tables.effect_rows(table)
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in tables.EFFECT_HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in row) + "</tr>" for row in rows)
    return (f"<section><h2>Effect sizes against none</h2><table><caption>{html.escape(tables.effects_caption(table))}"
            f"</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>")


def runs_section(runs: pd.DataFrame, ui_url: str | None, experiment_id: str | None) -> str:
    """Run counts per cell by status and the MLflow run id of every run (a link when the UI's URL is known)."""
    def link(run_id: str) -> str:
        if ui_url and experiment_id:
            return (f'<a href="{html.escape(ui_url)}/#/experiments/{experiment_id}/runs/{run_id}">'
                    f'<code>{run_id}</code></a>')
        return f"<code>{html.escape(run_id)}</code>"

    rows = []
    for (model, dataset, regularizer), group in runs.groupby(["model", "dataset", "regularizer"], sort=True):
        counts = ", ".join(f"{n} {s}" for s, n in group["status"].value_counts().sort_index().items())
        ids = " ".join(link(str(r)) for r in group.sort_values("seed")["run_id"]) if "run_id" in group else ""
        rows.append(f"<tr><td>{html.escape(model)}</td><td>{html.escape(dataset)}</td>"
                    f"<td>{html.escape(regularizer)}</td><td>{counts}</td><td style='text-align:left'>{ids}</td></tr>")
    return ("<section><h2>Runs</h2><table><caption>Evaluate-phase runs per cell by status, with their MLflow run ids "
            "(open them with <code>ndebench ui</code>).</caption><thead><tr><th>model</th><th>dataset</th>"
            "<th>regularizer</th><th>runs</th><th>MLflow run ids (by seed)</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></section>")


def write_html(path: Path, study: str, runs: pd.DataFrame, tables: list, alpha: float, notes: list[str],
               figures: list[Path], groups: dict[str, list[Section]], *, ui_url: str | None = None,
               experiment_id: str | None = None) -> Path:
    """Write ``report.html``: the study's tables (``tables`` from :func:`report.study_tables`), ``notes``
    (e.g. why a critical-difference diagram is missing), its ``figures`` (PNG, inlined), every section of
    ``groups`` (heading -> sections) and the run table."""
    counts = runs["status"].value_counts()
    images = {p: data_uri(p) for p in figures if p.suffix == ".png"}
    images |= {p: data_uri(p) for group in groups.values() for s in group for p in s.figures if p.suffix == ".png"}
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>ndebench report: "
             f"{html.escape(study)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Study {html.escape(study)}</h1>",
             f"<p>{len(runs)} evaluate-phase runs: "
             + ", ".join(f"{int(n)} {html.escape(str(s))}" for s, n in counts.items())
             + ".</p>"]
    parts += [main_table_section(t, alpha) for t in tables]
    parts += [effects_section(tables[0])] if tables else []
    if notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    if figures:
        parts.append("<section><h2>Figures</h2>" + "".join(
            f'<figure><img src="{images[p]}" alt="{html.escape(p.stem)}"><figcaption>{html.escape(p.name)}'
            "</figcaption></figure>" for p in figures if p in images) + "</section>")
    for heading, group in groups.items():
        if group:
            parts.append(f"<h1>{html.escape(heading)}</h1>" + "".join(sections.to_html(s, images) for s in group))
    parts += [runs_section(runs, ui_url, experiment_id), "</body></html>"]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
