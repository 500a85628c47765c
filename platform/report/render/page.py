"""A Markdown page rendered from its Jinja2 template and the committed files it quotes (``ndebench page``).

The claims page (``docs/reproduction/README.md``) is written this way, so that no figure on it can differ from its
source: the template's prose holds no number; each figure is an expression on what the page quotes, read when the page
is rendered, and formatted by a filter. In a template:

- ``report(folder)``: the ``summary.json`` of a report folder (relative to the template's folder) as nested dicts and
  lists (``report(folder, "methods.json")``: another JSON file of the report); ``table(path, title)``: the rows of
  the Markdown table under the heading ``title`` of a committed report file (``architectures.md``), each a dict of
  its cells' text; ``config(path)``: a sweep config (YAML); ``paper``: the paper's data (``paper.summary``,
  ``paper.cells``, ``paper.datasets``: lists of rows, :mod:`~ndebench.platform.report.paper.data`);
- ``rows | one(key=value, ...)``: the one row (dict) of a list with these values, an error when none or several
  match; ``rows | where(key=value, ...)``: all of them;
- ``x | f(".3f")``: ``format(x, spec)``; shortcuts ``x | d3`` (``.3f``), ``x | s3`` (``+.3f``), ``x | g3`` (``.3g``).

An undefined name or key is an error (``jinja2.StrictUndefined``), never an empty string.
"""
from __future__ import annotations

import difflib
import json
from functools import partial
from pathlib import Path
from typing import Any

import jinja2
import yaml
from ndebench.platform.report.paper.data import paper_cells, paper_datasets, paper_summary


class PageError(ValueError):
    """A template that cannot be rendered: what went wrong, with the template's name and line where known."""


def one(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The single row of ``rows`` whose values equal ``match``; :class:`PageError` when none or several do."""
    found = where(rows, **match)
    if len(found) != 1:
        raise PageError(f"{len(found)} rows match {match}, expected exactly one")
    return found[0]


def where(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    """The rows of ``rows`` whose values equal ``match``, in order."""
    return [row for row in rows if all(row.get(k) == v for k, v in match.items())]


def markdown_rows(text: str, title: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table after the heading ``title`` in ``text``: one dict per row, header ->
    cell text (stripped); :class:`PageError` when there is no such heading or table."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.lstrip("#").strip() == title and line.startswith("#")]
    if not starts:
        raise PageError(f"no heading {title!r}")
    block = []
    for line in lines[starts[0] + 1:]:
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif block or line.startswith("#"):
            break
    if len(block) < 2:
        raise PageError(f"no table under the heading {title!r}")
    header = block[0]
    return [dict(zip(header, row, strict=True)) for row in block[2:]]


def _format(value: Any, spec: str) -> str:
    if value is None:
        raise PageError(f"a figure to format with {spec!r} is missing (null in its source)")
    return format(value, spec)


def _environment(folder: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(folder), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters.update(one=one, where=where, f=_format, d3=partial(_format, spec=".3f"),
                       s3=partial(_format, spec="+.3f"), g3=partial(_format, spec=".3g"))
    env.globals.update(
        report=lambda name, file="summary.json": json.loads((folder / name / file).read_text()),
        config=lambda name: yaml.safe_load((folder / name).read_text()),
        table=lambda name, title: markdown_rows((folder / name).read_text(), title),
        paper={"summary": paper_summary().to_dict("records"), "cells": paper_cells().to_dict("records"),
               "datasets": paper_datasets().to_dict("records")})
    return env


def render_page(template: Path) -> str:
    """The page that ``template`` (a Jinja2 file) renders from the files it reads (module docstring)."""
    template = Path(template)
    try:
        return _environment(template.parent).get_template(template.name).render()
    except jinja2.TemplateSyntaxError as exc:
        raise PageError(f"{template}, line {exc.lineno}: {exc.message}") from exc
    except (jinja2.UndefinedError, FileNotFoundError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise PageError(f"{template}: {type(exc).__name__}: {exc}") from exc


def page_diff(page: Path, rendered: str) -> str:
    """A unified diff of the committed ``page`` against ``rendered``; empty when they are equal."""
    current = page.read_text() if page.exists() else ""
    return "".join(difflib.unified_diff(current.splitlines(keepends=True), rendered.splitlines(keepends=True),
                                        f"{page} (committed)", f"{page} (rendered)"))


def write_page(template: Path, out: Path | None = None, *, check: bool = False) -> tuple[int, str]:
    """Render ``template`` into ``out`` (default: ``template`` without its ``.j2`` suffix), or with ``check`` compare
    instead: ``(0, what was done)``, or ``(1, the diff)`` when the committed page is not the rendering."""
    if not template.is_file():
        raise ValueError(f"{template}: no such template")
    if out is None and template.suffix != ".j2":
        raise ValueError(f"{template}: name the page with --out (the template has no .j2 suffix to drop)")
    out = out or template.with_suffix("")
    rendered = render_page(template)
    if check:
        diff = page_diff(out, rendered)
        return (1, diff) if diff else (0, f"{out} is what {template} renders")
    out.write_text(rendered)
    return 0, f"wrote {out} from {template}"
