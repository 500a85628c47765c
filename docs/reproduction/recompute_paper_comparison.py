"""Recompute the paper comparison of the committed reproduction from its committed ``results.csv``.

The reproduction's MLflow store is not committed, so ``ndebench report --paper`` cannot be rerun on it. The paper
comparison needs only the evaluate runs (one row each in ``results.csv``, variant labels included), so this
script runs the same code as ``report --paper`` (:func:`ndebench.platform.report.paper.comparison.paper_comparison`)
on them and rewrites what that command writes from it: ``paper_comparison.md`` and ``.tex``, the paper sections at
the end of ``table.md`` and ``summary.json``'s ``paper_comparison``. Every other file, and every other part of these
files, stays as the report wrote it (``report.html`` keeps the comparison of the commit that wrote it).

    .venv/bin/python docs/reproduction/recompute_paper_comparison.py [REPORT_DIR]
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.report.paper.comparison import paper_comparison
from ndebench.platform.report.render import sections
from ndebench.platform.report.report import with_primary_metrics

FOLDER = Path(__file__).parent / "report" / "reproduction"
FIRST_PAPER_SECTION = "\n## The paper's cells beside the study\n"


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def recompute(folder: Path) -> list[Path]:
    """Rewrite the paper comparison of the report in ``folder`` from its ``results.csv``; return the paths."""
    runs = pd.read_csv(folder / "results.csv")
    runs, primary = with_primary_metrics(runs[runs["status"] == "ok"])
    found, payload = paper_comparison(runs, primary)
    summary = json.loads((folder / "summary.json").read_text())
    study = summary["study"]
    written = sections.write(found, folder, "paper_comparison", f"The paper's numbers beside the study: study {study}")
    table = folder / "table.md"
    head, mark, _ = table.read_text().partition(FIRST_PAPER_SECTION)
    if not mark:
        raise ValueError(f"{table} has no paper comparison to replace (no {FIRST_PAPER_SECTION.strip()!r})")
    table.write_text(head + "".join("\n" + sections.to_markdown(s) for s in found))
    summary["paper_comparison"] = _json_safe(payload["paper_comparison"])
    (folder / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False))
    return [*written, table, folder / "summary.json"]


if __name__ == "__main__":
    for path in recompute(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER):
        print(path)
