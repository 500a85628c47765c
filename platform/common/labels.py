"""A cell's name, written in one place: ``regularizer[key=value,...]``.

A tuned cell is named by its regularizer (``continuum_dropout``); a fixed-parameter variant by its regularizer and
the values it fixes in plan order (``continuum_dropout[p=0.3,m=50]``, ``none[model.hidden_size=16]``,
``none[n_mc=5]``); a cell that ran with ``scope: time`` (ndebench's extension, not the paper's method) carries
``scope=time`` among them. The plan names its cells with :func:`variant_label`
(:func:`~ndebench.platform.spec.plan.sweep_cells`) and records the values a variant fixes in its trials' config
(key ``fixed``, param ``fixed``); the record names each run's cell with :func:`cell_label` from those values (the
``label`` column of :func:`~ndebench.platform.record.runs.study_frame`), so a cell run, its trial runs and the
report's rows share one name, and readers that need a cell's settings read columns, never the name.
A run recorded before the ``fixed`` param existed is named by looking its variant tag up among the names its own
recorded values make (:func:`~ndebench.platform.record.runs.fixed_values`); no reader takes a name apart.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The setting that marks ndebench's extension of Continuum Dropout (regularizer.scope = time).
EXTENSION = ("scope", "time")


def variant_label(regularizer: str, params: Mapping[str, Any]) -> str:
    """``regularizer[k1=v1,k2=v2]``: the name of the cell fixing ``params`` (in their order); the bare
    ``regularizer`` when it fixes nothing."""
    return f"{regularizer}[{settings_text(params)}]" if params else regularizer


def settings_text(params: Mapping[str, Any]) -> str:
    """The inside of a name's brackets: ``p=0.3,m=50`` for ``{"p": 0.3, "m": 50}`` (in their order)."""
    return ",".join(f"{k}={v}" for k, v in params.items())


def cell_name(regularizer: str, variant: str | None = None) -> str:
    """The plan's name of a cell: its variant label (:func:`variant_label`) when it is a fixed-parameter variant,
    else its regularizer."""
    return variant or regularizer


def cell_label(regularizer: str, fixed: Mapping[str, Any], scope: Any = None) -> str:
    """The name of the cell a run belongs to: :func:`variant_label` of the values its cell fixes (``fixed``, ``{}``
    for a tuned cell), with ``scope=time`` among them when the run's regularizer ran with ``scope: time`` (``scope``,
    the run's ``regularizer.scope``), so that the extension is never shown under the paper's method's name."""
    return variant_label(regularizer, cell_settings(fixed, scope))


def cell_settings(fixed: Mapping[str, Any], scope: Any = None) -> dict[str, Any]:
    """The settings a cell's name shows: the values it fixes (``fixed``), then ``scope=time`` when the run's
    regularizer ran with ``scope: time``."""
    key, value = EXTENSION
    return {**fixed, key: value} if scope == value else dict(fixed)
