"""Which planned seeds of each cell a study has: the gaps the tables name in their cells."""
from __future__ import annotations

import itertools

import pandas as pd
from ndebench.platform.record.schema import COUNTED_STATUSES
from ndebench.platform.report.statistics import stats
from ndebench.platform.report.statistics.rows import cell_columns


def seed_coverage(runs: pd.DataFrame, planned_seeds: list[int] | None = None) -> pd.DataFrame:
    """Per cell (every model x dataset x row combination seen in ``runs``,
    :func:`~ndebench.platform.report.statistics.rows.cell_columns`): the planned seeds without
    any run (``missing_seeds``), the seeds still ``running`` or ``stopped``, and a one-line ``note``.

    ``planned_seeds`` defaults to the union of the seeds recorded in the study."""
    seeds = sorted(planned_seeds if planned_seeds is not None else {int(s) for s in runs["seed"] if int(s) >= 0})
    key = cell_columns(runs)
    models, datasets, regularizers = (sorted(set(runs[c])) for c in key)
    recorded: dict[tuple[str, str, str], list[tuple[str, int]]] = {}
    for model, dataset, regularizer, status, seed in runs[[*key, "status", "seed"]].itertuples(
            index=False, name=None):
        recorded.setdefault((model, dataset, regularizer), []).append((status, int(seed)))
    pairs = set(runs[["model", "dataset"]].itertuples(index=False, name=None))
    with_reg = set(runs[["model", key[-1]]].itertuples(index=False, name=None))
    rows = []
    for model, dataset, regularizer in itertools.product(models, datasets, regularizers):
        cell = recorded.get((model, dataset, regularizer), [])
        # A sweep crosses models, datasets and regularizers: a combination without runs is planned when each
        # of its parts has runs with the others' (the model on the dataset, the regularizer on the model).
        if not cell and not ((model, dataset) in pairs and (model, regularizer) in with_reg):
            continue
        by_status: dict[str, list[int]] = {}
        for status, seed in sorted(cell):
            by_status.setdefault(status, []).append(seed)
        missing = [seed for seed in seeds if seed not in {s for _, s in cell}]
        notes = [f"{len(v)} {k} (seed {', '.join(map(str, v))})" for k, v in by_status.items()
                 if k not in COUNTED_STATUSES]
        notes += [f"no run for seed {', '.join(map(str, missing))}"] if missing else []
        rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "missing_seeds": missing,
                     "running_seeds": by_status.get("running", []), "stopped_seeds": by_status.get("stopped", []),
                     "note": "; ".join(notes)})
    return pd.DataFrame(rows, columns=[*stats.CELL, "missing_seeds", "running_seeds", "stopped_seeds", "note"])
