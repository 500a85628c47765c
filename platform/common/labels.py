"""A cell's name, written and read in one place: ``regularizer[key=value,...]``.

A tuned cell is named by its regularizer (``continuum_dropout``); a fixed-parameter variant by its regularizer and
the values it fixes in plan order (``continuum_dropout[p=0.3,m=50]``, ``none[model.hidden_size=16]``,
``none[n_mc=5]``); a cell that ran with ``scope: time`` (ndebench's extension, not the paper's method) carries
``scope=time`` among them. The plan names its cells with :func:`variant_label`
(:func:`~ndebench.platform.spec.plan.sweep_cells`), the record names each evaluate run's cell with
:func:`cell_label` (the ``label`` column of :func:`~ndebench.platform.record.runs.study_frame`), and the engine names
a cell's run the same way, so a cell run, its trial runs and the report's rows share one name. Readers that need a
cell's settings read the frame's columns; :func:`parse_label` is the grammar's inverse, for a name alone.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# The setting that marks ndebench's extension of Continuum Dropout (regularizer.scope = time).
EXTENSION = ("scope", "time")
_PAIR = re.compile(r"([A-Za-z_][\w.]*)=(.*?)(?=,[A-Za-z_][\w.]*=|$)")


def variant_label(regularizer: str, params: Mapping[str, Any]) -> str:
    """``regularizer[k1=v1,k2=v2]``: the name of the cell fixing ``params`` (in their order); the bare
    ``regularizer`` when it fixes nothing."""
    if not params:
        return regularizer
    return f"{regularizer}[{','.join(f'{k}={v}' for k, v in params.items())}]"


def parse_settings(text: str) -> dict[str, str]:
    """The values inside a name's brackets: ``{"p": "0.3", "m": "50"}`` from ``p=0.3,m=50`` (values as written)."""
    return {m.group(1): m.group(2) for m in _PAIR.finditer(text)}


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """The inverse of :func:`variant_label`: ``("continuum_dropout", {"p": "0.3", "m": "50"})`` from
    ``continuum_dropout[p=0.3,m=50]`` (values as written). ``ValueError`` for a name outside the grammar."""
    name, bracket, inner = label.partition("[")
    if not bracket:
        return label, {}
    pairs = parse_settings(inner.removesuffix("]"))
    if not name or variant_label(name, pairs) != label:
        raise ValueError(f"cell name {label!r} is not of the form regularizer[key=value,...]")
    return name, pairs


def cell_name(regularizer: str, variant: str | None = None) -> str:
    """The plan's name of a cell: its variant label (:func:`variant_label`) when it is a fixed-parameter variant,
    else its regularizer."""
    return variant or regularizer


def cell_label(regularizer: str, variant: str | None = None, scope: Any = None) -> str:
    """The name of the cell a run belongs to: :func:`cell_name`, with ``scope=time`` among its settings when the
    run's regularizer ran with ``scope: time`` (``scope``, the run's ``regularizer.scope``), so that the extension is
    never shown under the paper's method's name."""
    name = cell_name(regularizer, variant)
    key, value = EXTENSION
    if scope != value:
        return name
    base, params = parse_label(name)
    return name if params.get(key) == value else variant_label(base, {**params, key: value})


def is_extension(label: str) -> bool:
    """Whether a cell's name (:func:`cell_label`) names a ``scope: time`` cell."""
    key, value = EXTENSION
    return parse_label(label)[1].get(key) == value
