"""Camera-ready LaTeX: every ``.tex`` table of a report set at the document's own size in a one- or two-column
article, with display names from the registries.

A tabular's natural width is estimated from Computer Modern's character widths at 10 pt (:data:`WIDTHS`; Times,
as in most two-column classes, is narrower, so the estimate errs wide): ``w = sum_j (max_i width(cell_ij) +
2 tabcolsep)``. :meth:`Grid.fits` then picks the first layout whose width fits: a ``table`` at ``\\normalsize`` when
``w <= 229.5 pt`` (the column of a two-column 10 pt article), else a ``table*`` (the page width, 345 pt in a
one-column article, 469 pt in a two-column one) at ``\\normalsize``, ``\\small`` (9 pt), then ``\\footnotesize``
(8 pt, the smallest), then at 8 pt with 3 pt column gaps; a table still too wide is split into column chunks that
repeat its label columns. Nothing is scaled (no ``\\resizebox``) and no text is set below 8 pt; significance
markers are superscripts, as in the paper's Tables 2-6. Each caption is one or two lines naming the test,
correction and alpha; the rest of what a reader needs (the test's full name, notes on cells) follows the tabular
in ``\\footnotesize``.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from ndebench.platform.common.labels import cell_settings, settings_text
from ndebench.platform.report.statistics.rows import ROW, scopes
from ndebench.regularizers.none import BASELINE

# Widths in pt of cmr10's characters (Knuth's cmr10.tfm, rounded); other characters count as WIDE.
WIDTHS = {**dict.fromkeys("0123456789", 5.0), ".": 2.78, ",": 2.78, ":": 2.78, ";": 2.78, "(": 3.89, ")": 3.89,
          "[": 2.78, "]": 2.78, "+": 7.78, "-": 3.33, "–": 5.0, "±": 7.78, " ": 3.33, "/": 5.0, "%": 8.33,
          "=": 7.78, "<": 7.78, ">": 7.78, "'": 2.78, "*": 5.0, "a": 5.0, "b": 5.56, "c": 4.44, "d": 5.56, "e": 4.44,
          "f": 3.06, "g": 5.0, "h": 5.56, "i": 2.78, "j": 3.06, "k": 5.28, "l": 2.78, "m": 8.33, "n": 5.56, "o": 5.0,
          "p": 5.56, "q": 5.28, "r": 3.92, "s": 3.94, "t": 3.89, "u": 5.56, "v": 5.28, "w": 7.22, "x": 5.28,
          "y": 5.28, "z": 4.44, "I": 3.61, "J": 5.14, "L": 6.25, "M": 9.17, "S": 5.56, "W": 10.28, "Z": 6.11,
          "_": 5.0}
CAPITAL, WIDE, BOLD = 7.5, 5.6, 1.15
TABCOLSEP = 6.0
# (environment, the width it must fit): a column of a two-column article, the text of a one-column one.
COLUMN, PAGE = 229.5, 345.0
SIZES = (("", 1.0), ("\\small", 0.9), ("\\footnotesize", 0.8))
# (environment, space, (size command, scale), tabcolsep): the last tier closes the column gaps to 3 pt.
LAYOUTS = (("table", COLUMN, SIZES[0], TABCOLSEP), *(("table*", PAGE, size, TABCOLSEP) for size in SIZES),
           ("table*", PAGE, SIZES[-1], 3.0))
# Slack for the estimate's error: a layout is taken only when the estimate is this much narrower than the space.
MARGIN = 0.97
SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
           "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "–": "--", "±": r"$\pm$",
           "†": r"$\dagger$", "▼": r"$\blacktriangledown$"}
MARKS = "abcdefghijklmnopqrstuvwxyz"


def escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (``continuum_dropout`` -> ``continuum\\_dropout``)."""
    return "".join(SPECIAL.get(ch, ch) for ch in str(text))


def width(text: str, bold: bool = False) -> float:
    """Estimated width in pt of ``text`` set in 10 pt Computer Modern (bold about 15% wider)."""
    w = sum(WIDTHS.get(ch, CAPITAL if ch.isupper() else WIDE) for ch in str(text))
    return w * (BOLD if bold else 1.0)


def display(name: str) -> str:
    """The name a paper prints for a registered identifier: a regularizer's, model's or dataset's ``display``
    (``continuum_dropout`` -> ``Continuum Dropout``, ``neural_cde`` -> ``Neural CDE``, ``uea/BasicMotions`` ->
    ``BasicMotions``); any other text unchanged. A row's name is printed from the columns it was made from
    (:func:`printed_names`), never taken apart here."""
    from ndebench.datasets.registry import REGISTRY as DATASETS
    from ndebench.datasets.registry import display_name
    from ndebench.models.registry import REGISTRY as MODELS
    from ndebench.regularizers.registry import REGISTRY as REGULARIZERS

    text = str(name)
    for registry in (REGULARIZERS, MODELS):
        if re.fullmatch(r"[a-z][a-z0-9_]*", text) and text in registry:
            return registry.info(text).display
    family = text.partition("/")[0]
    if re.fullmatch(r"[a-z][a-z0-9_]*(/[^/\s]+)?", text) and family in DATASETS:
        return display_name(text)
    return text


def printed_names(runs: pd.DataFrame) -> dict[str, str]:
    """Each row of ``runs`` (:func:`~ndebench.platform.report.render.tables.table_rows`) -> its name as a paper
    prints it, made from the columns its :data:`~ndebench.platform.report.statistics.rows.ROW` was made from: the
    regularizer's display name and the settings of its cell
    (:func:`~ndebench.platform.common.labels.cell_settings` of ``fixed`` and ``params.regularizer.scope``):
    ``continuum_dropout[p=0.1]`` -> ``Continuum Dropout [p=0.1]``. A row without those columns, or whose ``fixed`` is
    no mapping (a ``results.csv`` read back holds its text), is left out: it prints as it is named."""
    if ROW not in runs or "fixed" not in runs:
        return {}
    printed: dict[str, str] = {}
    for row, regularizer, fixed, scope in zip(runs[ROW], runs["regularizer"], runs["fixed"], scopes(runs),
                                              strict=True):
        if row not in printed and isinstance(fixed, dict):
            settings = cell_settings(fixed, scope)
            printed[row] = display(regularizer) + (f" [{settings_text(settings)}]" if settings else "")
    return printed


@dataclass
class TexCell:
    """A cell as LaTeX (``tex``) with its estimated width at 10 pt (``pt``)."""

    tex: str
    pt: float


def tex_cell(text: str, bold: bool = False, marker: str = "", mark: str = "", flag: bool = False) -> TexCell:
    """A cell of ``text`` (its display name), bold, with a significance ``marker``, a note's ``mark`` and
    ``flag`` (a down arrow: the paper's red cells) as one superscript (``0.767 (0.091)$^{**a}$``)."""
    shown = display(text)
    tex = escape(shown)
    tex = rf"\textbf{{{tex}}}" if bold else tex
    sup = (marker.replace("†", r"\dagger ") + (rf"\mathrm{{{mark}}}" if mark else "")
           + (r"\downarrow" if flag else ""))
    tex += f"$^{{{sup.strip()}}}$" if sup else ""
    return TexCell(tex, width(shown, bold) + 3.5 * (len(marker) + len(mark) + flag))


def header_cell(text: str, under: float) -> TexCell:
    """A header cell, broken onto two lines (a nested tabular) when one line is wider than the column's body
    (``under`` pt) and the text has a space."""
    shown = display(text)
    if width(shown) <= under or " " not in shown:
        return TexCell(escape(shown), width(shown))
    words = shown.split(" ")
    cut = min(range(1, len(words)), key=lambda k: max(width(" ".join(words[:k])), width(" ".join(words[k:]))))
    top, bottom = " ".join(words[:cut]), " ".join(words[cut:])
    return TexCell(rf"\begin{{tabular}}[b]{{@{{}}c@{{}}}}{escape(top)}\\\relax {escape(bottom)}\end{{tabular}}",
                   max(width(top), width(bottom)))


@dataclass
class Grid:
    """A table before layout: ``header`` and ``rows`` of :class:`TexCell`, ``align`` (one letter per column),
    ``keys`` (the leading label columns a split repeats), ``groups`` (``(title, width)`` spanning the columns
    after the first ``keys``, as the models over their datasets), ``caption`` (one or two lines, LaTeX),
    ``note`` (LaTeX, set in ``\\footnotesize`` below) and ``label``."""

    header: list[TexCell]
    rows: list[list[TexCell]]
    align: str
    caption: str
    note: str = ""
    label: str = ""
    keys: int = 1
    groups: list[tuple[str, int]] | None = None

    def natural(self) -> float:
        """The text width of the tabular's columns at 10 pt, group titles included (the column gaps,
        ``2 tabcolsep`` per column, which no size command scales, are not in it)."""
        widths = [max(c.pt for c in column) for column in zip(self.header, *self.rows, strict=True)]
        start = self.keys
        for title, span in self.groups or []:
            shortfall = width(display(title)) - sum(widths[start:start + span]) - 2 * TABCOLSEP * (span - 1)
            widths[start + span - 1] += max(shortfall, 0.0)
            start += span
        return sum(widths)

    def fits(self) -> tuple[str, str, float] | None:
        """``(environment, size command, tabcolsep)`` of the first layout of :data:`LAYOUTS` whose space holds the
        tabular, ``natural() * scale + 2 tabcolsep * columns``; None when none does."""
        for env, space, (size, scale), gap in LAYOUTS:
            if self.natural() * scale + 2 * gap * len(self.header) <= space * MARGIN:
                return env, size, gap
        return None


def render(grid: Grid) -> str:
    """``grid`` as one float (:meth:`Grid.fits`), or as several that split its columns after its ``keys`` when it is
    wider than a page at 8 pt, each repeating the label columns and breaking between groups where it can."""
    layout = grid.fits()
    if layout is not None:
        return _float(grid, *layout)
    edges = set(itertools.accumulate(w for _, w in grid.groups or [])) if grid.groups else set()
    parts, chunk = [], []
    for j in range(grid.keys, len(grid.header)):
        if chunk and _columns(grid, [*chunk, j]).fits() is None:
            # Break after the last whole group (a model's datasets stay together) where the chunk has one.
            cut = max((i + 1 for i, c in enumerate(chunk) if c - grid.keys + 1 in edges), default=len(chunk))
            parts.append(chunk[:cut])
            chunk = chunk[cut:]
        chunk.append(j)
    parts.append(chunk)
    out = []
    for i, columns in enumerate(parts):
        part = _columns(grid, columns)
        part.caption = f"{grid.caption} ({i + 1}/{len(parts)})"
        part.label = f"{grid.label}-{i + 1}" if grid.label and i else grid.label
        part.note = grid.note if i == len(parts) - 1 else ""
        out.append(_float(part, *(part.fits() or (LAYOUTS[-1][0], LAYOUTS[-1][2][0], LAYOUTS[-1][3]))))
    return "\n".join(out)


def _columns(grid: Grid, columns: list[int]) -> Grid:
    """``grid`` with its key columns and ``columns`` only (group spans cut to match)."""
    keep = list(range(grid.keys)) + columns
    groups = None
    if grid.groups:
        owner = [title for title, span in grid.groups for _ in range(span)]
        titles = [owner[j - grid.keys] for j in columns]
        groups = [(title, len(list(run))) for title, run in _runs(titles)]
    return Grid([grid.header[j] for j in keep], [[row[j] for j in keep] for row in grid.rows],
                "".join(grid.align[j] for j in keep), grid.caption, grid.note, grid.label, grid.keys, groups)


def _runs(items: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for item in items:
        if out and out[-1][0] == item:
            out[-1][1].append(item)
        else:
            out.append((item, [item]))
    return out


def _float(grid: Grid, env: str, size: str, gap: float = TABCOLSEP) -> str:
    # A caption above a booktabs rule needs the gap article's \belowcaptionskip (0 pt) leaves out.
    lines = [rf"\begin{{{env}}}[htbp]", r"\centering\setlength{\belowcaptionskip}{4pt}" + (f"{size}" if size else "")
             + (rf"\setlength{{\tabcolsep}}{{{gap:g}pt}}" if gap != TABCOLSEP else "")]
    lines += [rf"\caption{{{grid.caption}}}"] + ([rf"\label{{{grid.label}}}"] if grid.label else [])
    lines += [rf"\begin{{tabular}}{{{grid.align}}}", r"\toprule"]
    if grid.groups:
        lines.append(" & ".join([""] * grid.keys + [rf"\multicolumn{{{w}}}{{c}}{{{escape(display(g))}}}"
                                                   for g, w in grid.groups]) + r" \\")
        starts = [grid.keys + 1 + sum(w for _, w in grid.groups[:i]) for i in range(len(grid.groups))]
        lines.append(" ".join(rf"\cmidrule(lr){{{a}-{a + w - 1}}}" for a, (_, w) in zip(starts, grid.groups,
                                                                                       strict=True)))
    lines += [" & ".join(c.tex for c in grid.header) + r" \\", r"\midrule"]
    lines += [" & ".join(c.tex for c in row) + r" \\" for row in grid.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [r"\par\smallskip\footnotesize " + grid.note] if grid.note else []
    return "\n".join(lines + [rf"\end{{{env}}}", ""])


def notes_marked(notes: Sequence[str]) -> tuple[dict[str, str], str]:
    """A letter per distinct cell note (``{"n=4": "a"}``) and the sentence that explains them
    (``a: n=4.``)."""
    marks = {}
    for note in notes:
        if note and note not in marks:
            marks[note] = MARKS[len(marks) % len(MARKS)]
    return marks, " ".join(f"$^{{\\mathrm{{{m}}}}}$ {escape(n)}." for n, m in marks.items())


def cell_note(cell: Any) -> str:
    """What a cell's lettered mark explains: its note and its warning (``n=4; did not learn``)."""
    return "; ".join(x for x in (cell.note, cell.warning) if x)


def named(tex: str) -> str:
    """LaTeX text with each escaped identifier in it (``continuum\\_dropout``, ``uea/GunPoint``) as its
    :func:`display` name."""
    return re.sub(r"\b[a-z][a-z0-9]*(?:\\_[a-z0-9]+)+|\b[a-z][a-z0-9_]*/[A-Za-z0-9]+",
                  lambda m: escape(display(m[0].replace("\\_", "_"))), tex)


def section_grid(section: Any, names: Mapping[str, str] | None = None) -> Grid:
    """A report :class:`~ndebench.platform.report.render.sections.Section` as a :class:`Grid`: display names for
    registered identifiers, a label column or a count that holds one value in every row (the model of a one-model
    study, the number of datasets) moved into the note, long headers on two lines, cell notes and warnings as
    lettered superscripts explained in the note, ``short_caption`` (else the title) as the caption and the full
    caption in the note. ``names``: a row name -> its printed name (:func:`printed_names`)."""
    names = names or {}
    keys = max(1, len(section.align) - len(section.align.lstrip("l"))) if section.align else 1
    header, rows = list(section.header), [list(r) for r in section.rows]
    constant = [j for j in range(len(header)) if len(rows) > 1 and len({r[j].text for r in rows}) == 1
                and len(header) > 2 and not section.groups and (j < keys or rows[0][j].text.isdigit())]
    fixed = [f"{display(header[j]).capitalize()}: {display(names.get(rows[0][j].text, rows[0][j].text))}."
             for j in constant]
    keep = [j for j in range(len(header)) if j not in constant]
    marks, explained = notes_marked([cell_note(c) for r in rows for c in r])
    body = [[tex_cell(names.get(c.text, c.text), c.bold, c.marker, marks.get(cell_note(c), ""), c.flag)
             for c in (r[j] for j in keep)] for r in rows]
    if any(c.flag for r in rows for c in r):
        explained += rf" $^{{\downarrow}}$ {escape(section.flag_legend)}."
    heads = [header_cell(header[j], max((row[i].pt for row in body), default=0.0)) for i, j in enumerate(keep)]
    align = "".join((section.align or "l" + "c" * (len(header) - 1))[j] for j in keep)
    note = " ".join(x for x in (" ".join(escape(f) for f in fixed),
                                named(section.tex_caption or escape(section.caption)),
                                " ".join(escape(n) for n in section.notes), explained) if x)
    short = section.short_caption or escape(re.sub(r"[a-z][a-z0-9_]*(?:/\S+|_\S+)", lambda m: display(m[0]),
                                                   section.title))
    return Grid(heads, body, align, short, note, section.label, max(1, keys - sum(j < keys for j in constant)),
                section.groups or None)


def section_table(section: Any, names: Mapping[str, str] | None = None) -> str:
    """A report section as booktabs LaTeX laid out by :func:`render`, its rows' ``names`` printed as
    :func:`section_grid` does; a section without a header is a ``\\paragraph`` of its caption and notes."""
    if not section.header:
        notes = "".join(rf" {escape(note)}" for note in section.notes)
        return rf"\paragraph{{{escape(section.title)}}} {escape(section.caption)}{notes}" + "\n"
    return render(section_grid(section, names))


def significance_caption(metric: str, n: int, test: str, correction: str, alpha: float) -> str:
    """The paper's caption (at most two lines in a column): metric, seeds, the markers' levels, the test and the
    correction (``Test accuracy, mean (std) of 5 seeds; */**: p < 0.05/0.01, paired t-test vs. None,
    uncorrected.``)."""
    tests = {"student": "Student's $t$-test", "welch": "Welch's $t$-test", "paired": "paired $t$-test"}
    corrected = "uncorrected" if correction == "none" else f"{escape(correction.capitalize())}-corrected"
    return (f"Test {escape(metric)}, mean (std) of {n} seeds; $^{{*}}$/$^{{**}}$: $p<{alpha:g}$/${alpha / 5:g}$, "
            f"{tests.get(test, escape(test))} vs.\\ {display(BASELINE)}, {corrected}.")
