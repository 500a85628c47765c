"""A run's row in the report: the name of the cell it belongs to, in a column of its own.

:func:`~ndebench.platform.report.render.tables.table_rows` writes it into :data:`ROW`, so that each fixed-parameter
variant and each ``scope: time`` cell is a row of its own while a run's ``regularizer`` stays the regularizer it ran.
Per-cell frames (keyed on :data:`~ndebench.platform.report.statistics.stats.CELL`) and the report's files
(``results.csv``, ``summary.json``, ``report.html``) call a row's name ``regularizer``, as they always have.
"""
from __future__ import annotations

import pandas as pd

ROW = "row"
# The param a run's ``scope: time`` is read from (ndebench's extension of Continuum Dropout), as a frame column.
SCOPE = "params.regularizer.scope"


def cell_columns(runs: pd.DataFrame) -> list[str]:
    """The columns naming each run's cell in ``runs``: ``model``, ``dataset`` and its row, :data:`ROW`, else
    ``regularizer`` (a frame of one row per regularizer, or a ``results.csv`` read back, whose ``regularizer`` holds
    its rows' names)."""
    return ["model", "dataset", ROW if ROW in runs.columns else "regularizer"]


def row_names(runs: pd.DataFrame) -> pd.Series:
    """Each run's row (the last of :func:`cell_columns`), as a series called ``regularizer``: a per-cell frame's name
    for it."""
    return runs[cell_columns(runs)[-1]].rename("regularizer")


def scopes(runs: pd.DataFrame) -> pd.Series:
    """Each run's ``regularizer.scope`` (:data:`SCOPE`), None throughout a frame without that column."""
    return runs[SCOPE] if SCOPE in runs else pd.Series([None] * len(runs), index=runs.index, dtype=object)
