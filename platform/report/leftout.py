"""Finished runs a report leaves out: when one (cell, seed) has more than one finished run (a second driver's
duplicate, or an attempt a rerun superseded), the report counts its current run only, and says which and
which not (:func:`~ndebench.platform.record.completeness.left_out_finished`)."""
from __future__ import annotations

from typing import Any

LISTED = 50


def left_out_markdown(left_out: list[dict[str, Any]]) -> str:
    """A ``table.md`` section listing the left-out runs and the run counted instead of each (``""`` if none)."""
    if not left_out:
        return ""
    lines = ["", "## Finished runs left out", "",
             f"{len(left_out)} finished run(s) share their (cell, seed) with another; the statistics count one run "
             "per (cell, seed), its newest finished run.", "",
             "| cell | seed | left out | status | counted instead |", "|---|---|---|---|---|"]
    lines += [f"| {r['cell']} | {r['seed']} | {r['run_id']} | {r['status']} | {r['counted_instead']} |"
              for r in left_out[:LISTED]]
    if len(left_out) > LISTED:
        lines.append(f"\n... and {len(left_out) - LISTED} more (summary.json `left_out_runs`).")
    return "\n".join(lines) + "\n"
