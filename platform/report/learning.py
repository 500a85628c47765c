"""Learning dynamics of a study: per-epoch loss curves and the "did not learn" flag.

A regularizer can stop a model from learning at all (Continuum Dropout on a univariate Neural CDE, see
docs/regularizers.md): its test metric is then a training failure, not a regularization effect. A cell is flagged when
the mean over its ``ok`` seeds of the final epoch's training loss is not at least :data:`MARGIN` (5%) below
the chance-level loss ``ln K`` of a K-class task (``ln 2`` for a binary one: the loss of predicting the
uniform distribution). The check needs only each run's final metrics; the curves need each run's per-epoch
``train_loss`` and ``val_loss`` histories, one MLflow request per run and key, so a report reads them for one
seed per cell (:func:`curve_runs`, the lowest ``ok`` seed) of at most :data:`CURVE_PAIRS` (model, dataset)
pairs, those with a cell that did not learn first.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from ndebench.datasets.registry import dataset_info
from ndebench.platform.common.registry import UnknownNameError
from ndebench.platform.report.statistics.learned import FLAG, MARGIN
from ndebench.platform.report.statistics.stats import CELL

CURVE_KEYS = ("train_loss", "val_loss")
CURVE_PAIRS = 50


def chance_loss(num_classes: int) -> float:
    """Cross-entropy of the uniform prediction over ``num_classes`` K >= 2 classes: ``ln K``."""
    if num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r}: a classification task has at least 2 classes")
    return math.log(num_classes)


def _registered_classes(dataset: str) -> int:
    try:
        expected = dataset_info(dataset).expected
    except (UnknownNameError, ValueError):
        return -1
    classes = expected.get("classes")
    return int(classes) if classes else -1


def class_counts(runs: pd.DataFrame) -> dict[str, int]:
    """K per dataset: the runs' tag ``ndebench.num_classes`` (column ``num_classes``), else the class count
    the dataset registered (older runs); -1 where neither is known."""
    out = {}
    for dataset, group in runs.groupby("dataset", sort=True):
        tagged = [int(k) for k in group.get("num_classes", pd.Series(dtype=float)).dropna() if int(k) >= 2]
        out[dataset] = max(tagged) if tagged else _registered_classes(str(dataset))
    return out


def learning_check(runs: pd.DataFrame, classes: dict[str, int] | None = None) -> pd.DataFrame:
    """Per cell of ``runs`` (columns ``model, dataset, regularizer, status, final_train_loss``): ``n`` ok runs
    with a final training loss, their mean ``final_train_loss``, ``chance`` ``ln K``, ``threshold``
    ``(1 - MARGIN) ln K`` and ``learned`` (mean < threshold; ``None`` where K or the losses are unknown)."""
    classes = classes if classes is not None else class_counts(runs)
    columns = [*CELL, "n", "final_train_loss", "chance", "threshold", "learned"]
    if "final_train_loss" not in runs.columns:
        return pd.DataFrame(columns=columns)
    ok = runs[runs["status"] == "ok"]
    # Plain lists, not a frame per cell: at thousands of cells pandas' per-group slicing cost seconds.
    cells: dict[tuple[str, str, str], list[float]] = {}
    for *key, loss in zip(*(ok[c].tolist() for c in CELL), ok["final_train_loss"].astype(float).tolist(),
                          strict=True):
        if all(isinstance(part, str) for part in key):
            cells.setdefault(tuple(key), []).append(loss)
    rows = []
    for (model, dataset, regularizer), values in sorted(cells.items()):
        losses = np.asarray(values, dtype=float)
        losses = losses[~np.isnan(losses)]
        k = classes.get(dataset, -1)
        chance = chance_loss(k) if k >= 2 else math.nan
        mean = float(losses.mean()) if len(losses) else math.nan
        known = len(losses) > 0 and math.isfinite(chance)
        rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "n": len(losses),
                     "final_train_loss": mean, "chance": chance, "threshold": (1 - MARGIN) * chance,
                     "learned": bool(mean < (1 - MARGIN) * chance) if known else None})
    return pd.DataFrame(rows, columns=columns)


def flags(check: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """``(model, dataset, regularizer)`` -> the flag text of every cell of :func:`learning_check` that did not learn."""
    return {(r.model, r.dataset, r.regularizer):
            f"{FLAG}: final train loss {r.final_train_loss:.3f} vs chance ln K = {r.chance:.3f}"
            for r in check.itertuples(index=False) if r.learned is False}


def curve_runs(runs: pd.DataFrame, check: pd.DataFrame, *, flagged_only: bool = False,
               limit: int = CURVE_PAIRS) -> list[str]:
    """The runs whose curves a report reads: the ``ok`` run of the lowest seed of each cell, for the (model,
    dataset) pairs with a cell that did not learn (``check`` from :func:`learning_check`), then, unless
    ``flagged_only``, the other pairs in name order, at most ``limit`` pairs."""
    ok = runs[runs["status"] == "ok"].sort_values([*CELL, "seed"], kind="stable").drop_duplicates(CELL)
    pairs = sorted({(r.model, r.dataset) for r in ok.itertuples(index=False)})
    failing = {(r.model, r.dataset) for r in check.itertuples(index=False) if r.learned is False}
    chosen = [p for p in pairs if p in failing] + ([] if flagged_only else [p for p in pairs if p not in failing])
    keep = set(chosen[:limit])
    return [r.run_id for r in ok.itertuples(index=False) if (r.model, r.dataset) in keep]


def read_curves(client: Any, run_ids: list[str]) -> pd.DataFrame:
    """The per-epoch ``train_loss`` and ``val_loss`` of each run: columns ``run_id, epoch, train_loss,
    val_loss`` (NaN where a run lacks one of them), epochs 1, 2, ..., one MLflow history request per run and key.
    The step-0 point that earlier versions logged beside the history (the final value) is no epoch: left out."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for run_id in run_ids:
        for key in CURVE_KEYS:
            for point in (p for p in client.get_metric_history(run_id, key) if p.step >= 1):
                rows.setdefault((run_id, int(point.step)), {"run_id": run_id, "epoch": int(point.step)})[key] = (
                    float(point.value))
    return pd.DataFrame(list(rows.values()), columns=["run_id", "epoch", *CURVE_KEYS])


def mean_curves(curves: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ``train_loss`` and ``val_loss`` per (cell, epoch) over the cell's ``ok`` runs, with ``n`` the runs
    that reached the epoch (early stopping ends seeds at different epochs)."""
    ok = runs.loc[runs["status"] == "ok", ["run_id", *CELL]]
    merged = curves.merge(ok, on="run_id")
    grouped = merged.groupby([*CELL, "epoch"], sort=True)
    out = grouped[list(CURVE_KEYS)].mean()
    out["n"] = grouped.size()
    return out.reset_index()
