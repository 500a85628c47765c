"""Whether a study's evaluate runs ran on machines whose floating-point kernels differ.

A trial reruns bit for bit with the same code, libraries, CPU capability (the instruction set torch dispatches
its CPU kernels to), torch thread count and GPU; across those, kernels sum in another order and a run's
metrics can move by more than rounding (docs/faults.md, "Reproducibility across machines"). The runs carry them as tags
(:data:`~ndebench.platform.record.schema.MACHINE_TAGS`, columns of ``runs.evaluate_runs``).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

# The tags whose difference changes the kernels a run's arithmetic goes through; the CPU model is listed only.
KERNEL_TAGS = ("cpu_capability", "threads", "gpu")
LISTED = ("cpu_model", *KERNEL_TAGS, "gpu_driver")


def machines(runs: pd.DataFrame) -> dict[str, Any]:
    """``summary.json``'s ``machines``: per tag of :data:`LISTED` the runs by value (runs without the tag,
    recorded before it existed, left out), ``mixed`` (the :data:`KERNEL_TAGS` with more than one value) and
    ``note``, the report's line about them (``None`` when nothing is mixed)."""
    counts = {tag: {str(k): int(n) for k, n in runs[tag][runs[tag] != ""].value_counts().sort_index().items()}
              for tag in LISTED if tag in runs}
    mixed = [tag for tag in KERNEL_TAGS if len(counts.get(tag, {})) > 1]
    return {"runs_by": counts, "mixed": mixed, "note": _note(counts, mixed)}


def _note(counts: dict[str, dict[str, int]], mixed: list[str]) -> str | None:
    if not mixed:
        return None
    what = "; ".join(f"{tag.replace('_', ' ')}: " + ", ".join(f"{value} ({n} runs)" for value, n in counts[tag].items())
                     for tag in mixed)
    return (f"Mixed machines: the runs differ in {what}. Floating-point kernels differ between these, so a "
            "seed's metrics can differ by more than rounding between them; compare runs of one kind, or rerun on "
            "one (docs/faults.md, \"Reproducibility across machines\").")
