"""Renderer-neutral report sections (a table, its caption, its figures) written as Markdown, LaTeX and HTML.

Every table of a report is a :class:`Section`: the per-study tables, effect sizes and across-dataset comparison
of ``table.md`` (:mod:`~ndebench.platform.report.render.tables`) and the analyses of :mod:`sensitivity`,
:mod:`timing`, :mod:`summary`, :mod:`mc_samples` and the others; ``report.html`` and the ``.md``/``.tex`` files
render the same objects, so the three formats never disagree.
"""
from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure
from ndebench.platform.report.render import latex
from ndebench.platform.report.render.figures import save_png_pdf


@dataclass
class Cell:
    """One table cell: ``text``, shown bold (best value) and/or flagged (``flag``: the paper's red cells), with a
    significance ``marker`` (``*``, ``**``, ``†``, ``††``), a bracketed ``note`` (another n, failed runs) and a
    ``warning`` in words (a cell that did not learn)."""

    text: str
    bold: bool = False
    flag: bool = False
    marker: str = ""
    note: str = ""
    warning: str = ""


@dataclass
class Section:
    """A titled table (``header`` and ``rows`` of :class:`Cell`), its caption, notes and figure files.

    ``align``: one letter per column, ``l`` or ``r`` (default: ``l`` first, ``c`` after in LaTeX, all left in
    Markdown); ``groups``: titles spanning consecutive columns after the first, ``(title, width)`` (LaTeX: a
    header row of its own; Markdown and HTML: ``group / column``); ``label``: the LaTeX ``\\label`` (LaTeX
    tables are laid out by :mod:`~ndebench.platform.report.render.latex`); ``tex_caption``
    and ``md_caption``: the caption with its own markup in that format (significance markers), where it differs
    from ``caption``; ``short_caption``: the caption as LaTeX (one or two lines: what, test, correction, alpha), the
    full caption then following the table in ``\\footnotesize`` (default: the title)."""

    title: str
    header: list[str]
    rows: list[list[Cell]]
    caption: str
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flag_legend: str = "worse than the baseline's mean minus one std"
    align: str = ""
    groups: list[tuple[str, int]] = field(default_factory=list)
    label: str = ""
    tex_caption: str = ""
    md_caption: str = ""
    short_caption: str = ""

    def titles(self) -> list[str]:
        """The column titles with their group's title (``neural_cde / GunPoint``), as Markdown and HTML show them."""
        if not self.groups:
            return list(self.header)
        spans = [title for title, width in self.groups for _ in range(width)]
        return [self.header[0]] + [f"{g} / {h}" for g, h in zip(spans, self.header[1:], strict=True)]


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters (``continuum_dropout`` -> ``continuum\\_dropout``)."""
    return latex.escape(text)


def md_escape(text: str) -> str:
    """Escape Markdown table and emphasis characters (``|``, ``*``)."""
    return text.replace("|", "\\|").replace("*", "\\*")


def mean_std(mean: float, std: float, n: int, digits: int = 3) -> str:
    """``"0.938 (0.004)"``; the std is left out when n < 2 and the cell is ``–`` when n = 0."""
    if n == 0 or mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    return f"{mean:.{digits}f}" + (f" ({std:.{digits}f})" if n > 1 else "")


def save_figure(fig: Figure, path: Path) -> list[Path]:
    """Save ``fig`` as ``path`` (PNG, for the HTML report) and beside it as PDF (for papers); both paths."""
    save_png_pdf(fig, path, bbox_inches="tight")
    return [path, path.with_suffix(".pdf")]


def to_markdown(section: Section) -> str:
    """``## title``, a pipe table (bold as ``**x**``, flagged cells suffixed ``▼``), caption, notes, figures; a
    section without a header is its caption and notes alone."""
    def cell(c: Cell) -> str:
        text = md_escape(c.text)
        text = (f"**{text}**" if c.bold else text) + md_escape(c.marker)
        text += (f" [{md_escape(c.note)}]" if c.note else "") + (f" **{md_escape(c.warning)}**" if c.warning else "")
        return text + (" ▼" if c.flag else "")

    align = section.align or "l" * len(section.header)
    lines = [f"## {section.title}", ""]
    lines += ["| " + " | ".join(map(md_escape, section.titles())) + " |",
              "|" + "".join("---:|" if a == "r" else "---|" for a in align)] if section.header else []
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in section.rows]
    legend = f" ▼: {section.flag_legend}." if any(c.flag for row in section.rows for c in row) else ""
    lines += ([""] if section.header else []) + [(section.md_caption or section.caption) + legend]
    lines += [f"- {note}" for note in section.notes]
    lines += [f"![{p.stem}]({p.name})" for p in section.figures if p.suffix == ".png"]
    return "\n".join(lines) + "\n"


def to_latex(section: Section, names: Mapping[str, str] | None = None) -> str:
    """A booktabs table set at the document's size in a column or across the page, its rows' ``names`` printed
    (:func:`~ndebench.platform.report.render.latex.section_table`); a section without a header is a
    ``\\paragraph`` of its caption and notes."""
    return latex.section_table(section, names)


def to_html(section: Section, images: dict[Path, str]) -> str:
    """An HTML ``<section>``: table (``<b>`` for bold, class ``flag`` for flagged cells), caption, notes and
    the PNG figures as ``<img>`` with the data URIs in ``images`` (path -> ``data:image/png;base64,...``)."""
    def cell(c: Cell) -> str:
        text = html.escape(c.text)
        text = (f"<b>{text}</b>" if c.bold else text) + html.escape(c.marker)
        text += f" <small>[{html.escape(c.note)}]</small>" if c.note else ""
        text += f" <b class='flag'>{html.escape(c.warning)}</b>" if c.warning else ""
        return f'<td class="flag">{text}</td>' if c.flag else f"<td>{text}</td>"

    head = "".join(f"<th>{html.escape(h)}</th>" for h in section.titles())
    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in section.rows)
    legend = f" Red: {section.flag_legend}." if any(c.flag for row in section.rows for c in row) else ""
    parts = [f"<section><h2>{html.escape(section.title)}</h2>",
             f"<table><caption>{html.escape(section.caption + legend)}</caption>"
             f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if section.header
             else f"<p>{html.escape(section.caption)}</p>"]
    if section.notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in section.notes) + "</ul>")
    for path in section.figures:
        if path in images:
            parts.append(f'<figure><img src="{images[path]}" alt="{html.escape(path.stem)}">'
                         f"<figcaption>{html.escape(path.name)} (PDF: {html.escape(path.with_suffix('.pdf').name)})"
                         "</figcaption></figure>")
    return "".join(parts) + "</section>"


def write(sections: list[Section], directory: Path, stem: str, heading: str,
          names: Mapping[str, str] | None = None) -> list[Path]:
    """Write ``<stem>.md`` and ``<stem>.tex`` holding ``sections`` (in LaTeX with their rows' printed ``names``,
    :func:`to_latex`); return their paths (none if empty)."""
    if not sections:
        return []
    md, tex = directory / f"{stem}.md", directory / f"{stem}.tex"
    md.write_text(f"# {heading}\n\n" + "\n".join(to_markdown(s) for s in sections))
    tex.write_text(f"% {heading}: generated by ndebench. Needs \\usepackage{{booktabs}}.\n\n"
                   + "\n".join(to_latex(s, names) for s in sections))
    return [md, tex]
