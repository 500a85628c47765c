"""Finished runs a report leaves out (:func:`~ndebench.platform.record.completeness.left_out_finished`): runs of
another config than the current one, of a seed or cell the config no longer has, a second driver's duplicate, an
attempt a rerun superseded. They stay in MLflow; the report says which, why, and which run counts instead."""
from __future__ import annotations

from typing import Any

LISTED = 50


def left_out_markdown(left_out: list[dict[str, Any]]) -> str:
    """A ``table.md`` section listing the left-out runs, why, and the run counted instead of each (``""`` if
    none)."""
    if not left_out:
        return ""
    lines = ["", "## Finished runs left out", "",
             f"{len(left_out)} finished run(s) are not counted: the statistics count one run per planned (cell, "
             "seed), its newest finished run of the current config.", "",
             "| cell | seed | left out | status | why | counted instead |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['cell']} | {r['seed']} | {r['run_id']} | {r['status']} | {r.get('reason', '')} | "
              f"{r['counted_instead'] or 'none'} |" for r in left_out[:LISTED]]
    if len(left_out) > LISTED:
        lines.append(f"\n... and {len(left_out) - LISTED} more (summary.json `left_out_runs`).")
    return "\n".join(lines) + "\n"
