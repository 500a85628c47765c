"""Test selection measured on the paper's own numbers (``ndebench report --paper``).

- **Chance gain at the paper's spread** (Tables 9-11): choosing the best of ``K = 20`` grid points on the test
  mean of ``n = 5`` seeds shows, when no grid point differs from the baseline, an expected gain of
  ``E[max of K standard normals] / sqrt(n) x sigma`` = 0.835 sigma
  (:func:`~ndebench.platform.report.statistics.agreement.chance_factor`; cells treated as independent, an upper
  bound when they share seeds), with sigma the row's ``baseline_std`` (the paper's mean per-set seed std). Each
  row's improvement is set beside it, and beside the study's own chance gain where the study has the row.
- **Cells equal to their grid's maximum**: a main-table cell (Tables 2, 3, 4) whose method the appendix reports
  on a grid (Tables 16, 17, 12) is compared with that grid's column maximum (same model, dataset, method and
  metric; Table 17's percentages as fractions, rounded to the main table's 3 decimals). A reported cell at its
  grid's maximum is what a choice on test performance gives. Per method, ``K`` (the grid's size) and its chance
  factor ``E[max of K] / sqrt(5)``: the selection advantage differs by method (best of 9 for the jump-diffusion
  competitors, best of 20 for Continuum Dropout's p x m grid, best of 25 for Table 12's).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.report.paper.data import PAPER_K, PAPER_SEEDS, paper_cells, paper_summary
from ndebench.platform.report.render.sections import Cell, Section
from ndebench.platform.report.statistics.agreement import chance_factor

GRID_TABLES = {2: 16, 3: 17, 4: 12}
"""Main table -> the appendix table that reports the same method on its grid."""
STUDIED = ("neural_cde", "neural_ode", "neural_lnsde")
CHANCE_COLUMNS = ["model", "split", "table", "improvement", "baseline_std", "chance_gain", "within_chance",
                  "study_chance_gain"]
MAXIMA_COLUMNS = ["table", "grid_table", "model", "dataset", "regularizer", "metric", "reported", "grid_max",
                  "grid_min", "k", "at_max"]


def paper_chance_gains(across: pd.DataFrame | None = None, k: int = PAPER_K, n: int = PAPER_SEEDS) -> pd.DataFrame:
    """Per row of Tables 9-11: the improvement beside ``chance_factor(k, n) x baseline_std`` and whether it is at
    or below it; ``study_chance_gain`` from ``across`` (``compare_summary``) where it has the row (columns
    :data:`CHANCE_COLUMNS`)."""
    rows = paper_summary()
    study = {} if across is None or across.empty else across.set_index(["model", "split"])["chance_gain_best_of_k"]
    factor = chance_factor(k, n)
    out = rows.assign(chance_gain=factor * rows["baseline_std"])
    out = out.assign(within_chance=out["improvement"] <= out["chance_gain"],
                     study_chance_gain=[float(study.get((m, s), np.nan)) for m, s in zip(out["model"], out["split"],
                                                                                        strict=True)])
    return out[CHANCE_COLUMNS].reset_index(drop=True)


def _fraction(frame: pd.DataFrame) -> pd.Series:
    return np.where(frame["unit"] == "percent", frame["mean"] / 100, frame["mean"])


def column_maxima() -> pd.DataFrame:
    """Every main-table cell of :data:`GRID_TABLES` with a grid in its appendix table, beside the grid's maximum
    and minimum (columns :data:`MAXIMA_COLUMNS`)."""
    cells = paper_cells()
    cells = cells.assign(value=_fraction(cells))
    keys = ["model", "dataset", "regularizer", "metric"]
    rows = []
    for table, grid_table in GRID_TABLES.items():
        grid = cells[(cells["table"] == grid_table) & (cells["setting"] != "")]
        main = cells[(cells["table"] == table) & (cells["setting"] == "")]
        for cell in main.itertuples(index=False):
            points = grid[(grid[keys] == pd.Series({k: getattr(cell, k) for k in keys})).all(axis=1)]
            if points.empty:
                continue
            top = float(points["value"].max())
            rows.append({"table": table, "grid_table": grid_table, "model": cell.model, "dataset": cell.dataset,
                         "regularizer": cell.regularizer, "metric": cell.metric, "reported": float(cell.value),
                         "grid_max": top, "grid_min": float(points["value"].min()), "k": len(points),
                         "at_max": bool(abs(round(top, 3) - cell.value) < 1e-9)})
    return pd.DataFrame(rows, columns=MAXIMA_COLUMNS)


def per_method(maxima: pd.DataFrame) -> pd.DataFrame:
    """Per method and grid size: cells compared, cells at their grid's maximum, and the chance factor."""
    if maxima.empty:
        return pd.DataFrame(columns=["regularizer", "k", "tables", "cells", "at_max", "chance_factor"])
    grouped = maxima.groupby(["regularizer", "k"], sort=True)
    return pd.DataFrame([{"regularizer": reg, "k": int(k),
                          "tables": ", ".join(sorted({f"{t} vs {g}" for t, g in zip(group["table"],
                                                                                     group["grid_table"],
                                                                                     strict=True)})),
                          "cells": len(group), "at_max": int(group["at_max"].sum()),
                          "chance_factor": chance_factor(int(k), PAPER_SEEDS)} for (reg, k), group in grouped])


def _g(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.3f}"


def evidence_sections(chance: pd.DataFrame, maxima: pd.DataFrame) -> list[Section]:
    """The chance gain at the paper's spread and the column-maximum evidence as report sections."""
    factor = chance_factor(PAPER_K, PAPER_SEEDS)
    studied = chance[chance["model"].isin(STUDIED) & (chance["split"] != "all")]
    chance_rows = [[Cell(r.model), Cell(f"{r.split} (Table {r.table})"), Cell(f"{r.improvement:+.3f}"),
                    Cell(f"{r.baseline_std:.3f}"), Cell(f"{r.chance_gain:+.3f}"),
                    Cell("yes" if r.within_chance else "no", flag=not r.within_chance),
                    Cell(_g(r.study_chance_gain))] for r in chance.itertuples(index=False)]
    first = Section(
        f"Chance gain of best-of-{PAPER_K} at the paper's own spread",
        ["model", "split", "paper improvement", "paper baseline_std", f"chance gain ({factor:.3f} x std)",
         "at or below chance", "chance gain at the study's spread"], chance_rows,
        f"Chance gain: the expected gain of the best of {PAPER_K} grid points over one baseline on the test mean of "
        f"{PAPER_SEEDS} seeds when no grid point differs, E[max of {PAPER_K} standard normals] / sqrt({PAPER_SEEDS}) "
        f"= {factor:.3f} times the per-seed std, here the paper's baseline_std (Tables 9-11); an upper bound, as the "
        "grid's cells share seeds. At or below chance does not show that there is no effect; it shows that "
        "selection on the test set alone could give a gain this large.",
        notes=[f"Rows at or below chance: {int(chance['within_chance'].sum())} of {len(chance)}; of the univariate "
               f"and multivariate rows of {', '.join(STUDIED)}: {int(studied['within_chance'].sum())} of "
               f"{len(studied)}."],
        flag_legend="the paper's improvement exceeds the chance gain")
    maxima_rows = [[Cell(f"{r.table} vs {r.grid_table}"), Cell(r.model), Cell(r.dataset), Cell(r.regularizer),
                    Cell(f"{r.reported:.3f}"), Cell(f"{r.grid_max:.3f}"), Cell(f"{r.grid_min:.3f}"), Cell(str(r.k)),
                    Cell("yes" if r.at_max else "no", flag=r.at_max)] for r in maxima.itertuples(index=False)]
    methods = per_method(maxima)
    second = Section(
        "Test selection in the paper's tables: reported cells at their grid's maximum",
        ["tables", "model", "dataset", "method", "reported", "grid max", "grid min", "K", "at the maximum"],
        maxima_rows,
        "Each main-table cell whose method an appendix table reports over its grid (Tables 2 vs 16, 3 vs 17, "
        "4 vs 12), beside the grid's column maximum and minimum (Table 17's percentages as fractions, rounded to 3 "
        "decimals). Appendix D (Details of Experimental Settings): the Neural CDE architecture was chosen on test "
        "performance. A reported cell at its "
        f"grid's maximum is what a choice on the test set gives; the chance factor E[max of K] / sqrt({PAPER_SEEDS}) "
        "is the gain in per-seed stds that the choice alone shows, and it differs by method.",
        notes=[f"{m.regularizer} (Tables {m.tables}): {m.at_max} of {m.cells} reported cells at their grid's maximum; "
               f"best of K = {m.k}, chance factor {m.chance_factor:.3f} x std" for m in methods.itertuples(index=False)]
        + [f"Overall: {int(maxima['at_max'].sum())} of {len(maxima)} reported cells at their grid's maximum "
           f"({int(maxima.loc[maxima['regularizer'] != 'continuum_dropout', 'at_max'].sum())} competitor cells, "
           f"{int(maxima.loc[maxima['regularizer'] == 'continuum_dropout', 'at_max'].sum())} Continuum Dropout "
           f"cell{'s' if (maxima['regularizer'] == 'continuum_dropout').sum() != 1 else ''}). "
           f"Continuum Dropout's rows choose among {PAPER_K} grid points (chance factor {factor:.3f}), the "
           f"jump-diffusion competitors among 9 ({chance_factor(9, PAPER_SEEDS):.3f}): selection alone favours "
           f"Continuum Dropout by {factor - chance_factor(9, PAPER_SEEDS):.3f} x std over them."],
        flag_legend="equals the grid's maximum")
    return [first, second]


def evidence_json(chance: pd.DataFrame, maxima: pd.DataFrame) -> dict[str, Any]:
    """``summary.json``'s ``paper_comparison`` keys of this module."""
    return {"paper_chance_gain": {"k": PAPER_K, "n_seeds": PAPER_SEEDS, "factor": chance_factor(PAPER_K, PAPER_SEEDS),
                                  "rows": chance.to_dict(orient="records")},
            "column_maxima": {"cells": maxima.to_dict(orient="records"),
                              "per_method": per_method(maxima).to_dict(orient="records")}}
