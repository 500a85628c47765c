"""Renderer-neutral report sections (a table, its caption, its figures) written as Markdown, LaTeX and HTML.

The analyses of :mod:`sensitivity`, :mod:`timing`, :mod:`summary` and :mod:`mc_samples` each return
:class:`Section` objects; ``report.html`` and the ``.md``/``.tex`` files render the same objects, so the three
formats never disagree.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure
from ndebench.platform.report.render.figures import save_png_pdf
from ndebench.platform.report.render.tables import latex_escape


@dataclass
class Cell:
    """One table cell: ``text``, shown bold (best value) and/or flagged (``flag``: the paper's red cells)."""

    text: str
    bold: bool = False
    flag: bool = False


@dataclass
class Section:
    """A titled table (``header`` and ``rows`` of :class:`Cell`), its caption, notes and figure files."""

    title: str
    header: list[str]
    rows: list[list[Cell]]
    caption: str
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flag_legend: str = "worse than the baseline's mean minus one std"


def mean_std(mean: float, std: float, n: int, digits: int = 3) -> str:
    """``"0.938 (0.004)"``; the std is left out when n < 2 and the cell is ``–`` when n = 0."""
    if n == 0 or mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    return f"{mean:.{digits}f}" + (f" ({std:.{digits}f})" if n > 1 else "")


def save_figure(fig: Figure, path: Path) -> list[Path]:
    """Save ``fig`` as ``path`` (PNG, for the HTML report) and beside it as PDF (for papers); both paths."""
    save_png_pdf(fig, path, bbox_inches="tight")
    return [path, path.with_suffix(".pdf")]


def _md_text(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def to_markdown(section: Section) -> str:
    """``## title``, a pipe table (bold as ``**x**``, flagged cells suffixed ``▼``), caption, notes, figures."""
    def cell(c: Cell) -> str:
        text = _md_text(c.text)
        return (f"**{text}**" if c.bold else text) + (" ▼" if c.flag else "")

    lines = [f"## {section.title}", "", "| " + " | ".join(map(_md_text, section.header)) + " |",
             "|" + "---|" * len(section.header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in section.rows]
    legend = f" ▼: {section.flag_legend}." if any(c.flag for row in section.rows for c in row) else ""
    lines += ["", section.caption + legend]
    lines += [f"- {note}" for note in section.notes]
    lines += [f"![{p.stem}]({p.name})" for p in section.figures if p.suffix == ".png"]
    return "\n".join(lines) + "\n"


def to_latex(section: Section) -> str:
    """A booktabs table; flagged cells in ``\\textcolor{red}`` (needs ``xcolor``), bold ones ``\\textbf``."""
    def cell(c: Cell) -> str:
        text = latex_escape(c.text).replace("–", "--")
        text = rf"\textbf{{{text}}}" if c.bold else text
        return rf"\textcolor{{red}}{{{text}}}" if c.flag else text

    k = len(section.header)
    lines = [r"\begin{table}[htbp]", r"\centering", rf"\caption{{{latex_escape(section.caption)}}}",
             rf"\begin{{tabular}}{{l{'c' * (k - 1)}}}", r"\toprule",
             " & ".join(latex_escape(h) for h in section.header) + r" \\", r"\midrule"]
    lines += [" & ".join(cell(c) for c in row) + r" \\" for row in section.rows]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


def to_html(section: Section, images: dict[Path, str]) -> str:
    """An HTML ``<section>``: table (``<b>`` for bold, class ``flag`` for flagged cells), caption, notes and
    the PNG figures as ``<img>`` with the data URIs in ``images`` (path -> ``data:image/png;base64,...``)."""
    def cell(c: Cell) -> str:
        text = html.escape(c.text)
        text = f"<b>{text}</b>" if c.bold else text
        return f'<td class="flag">{text}</td>' if c.flag else f"<td>{text}</td>"

    head = "".join(f"<th>{html.escape(h)}</th>" for h in section.header)
    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in section.rows)
    legend = f" Red: {section.flag_legend}." if any(c.flag for row in section.rows for c in row) else ""
    parts = [f"<section><h2>{html.escape(section.title)}</h2>",
             f"<table><caption>{html.escape(section.caption + legend)}</caption>"
             f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]
    if section.notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in section.notes) + "</ul>")
    for path in section.figures:
        if path in images:
            parts.append(f'<figure><img src="{images[path]}" alt="{html.escape(path.stem)}">'
                         f"<figcaption>{html.escape(path.name)} (PDF: {html.escape(path.with_suffix('.pdf').name)})"
                         "</figcaption></figure>")
    return "".join(parts) + "</section>"


def write(sections: list[Section], directory: Path, stem: str, heading: str) -> list[Path]:
    """Write ``<stem>.md`` and ``<stem>.tex`` holding ``sections``; return their paths (none if empty)."""
    if not sections:
        return []
    md, tex = directory / f"{stem}.md", directory / f"{stem}.tex"
    md.write_text(f"# {heading}\n\n" + "\n".join(to_markdown(s) for s in sections))
    tex.write_text(f"% {heading}: generated by ndebench. Needs \\usepackage{{booktabs,xcolor}}.\n\n"
                   + "\n".join(to_latex(s) for s in sections))
    return [md, tex]
