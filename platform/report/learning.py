"""Learning dynamics of a study: per-epoch loss curves and the "did not learn" flag.

A regularizer can stop a model from learning at all (Continuum Dropout on a univariate Neural CDE, see
docs/regularizers.md): its test metric is then a training failure, not a regularization effect. A cell is flagged when
its test accuracy over its ``ok`` seeds is not shown above chance ``1/K`` of a K-class task
(:mod:`~ndebench.platform.report.statistics.learned` states the rule). The check needs only each run's final metrics;
the curves need each run's per-epoch ``train_loss`` and ``val_loss`` histories, one MLflow request per run and key,
so a report reads them for one seed per cell (:func:`curve_runs`, the lowest ``ok`` seed) of at most
:data:`CURVE_PAIRS` (model, dataset) pairs, those with a cell that did not learn first; the curves are drawn against
the chance-level loss ``ln K``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from ndebench.datasets.registry import dataset_info
from ndebench.platform.common.registry import UnknownNameError
from ndebench.platform.report.statistics.learned import ALPHA, FLAG
from ndebench.platform.report.statistics.rows import cell_columns, row_names
from ndebench.platform.report.statistics.stats import CELL
from scipy import stats as sps

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
    """Per cell of ``runs`` (columns ``model, dataset, regularizer, status, test_accuracy``, and
    ``final_train_loss`` where known; its cells as :func:`~ndebench.platform.report.statistics.rows.cell_columns`
    names them): ``n`` ok runs with a test accuracy, their mean ``test_accuracy``, ``chance_accuracy`` ``1/K``,
    ``p_above_chance`` (one-sided one-sample t-test of the seeds' accuracies against ``1/K``; NaN with one seed or
    no spread), ``learned`` (the rule of
    :mod:`~ndebench.platform.report.statistics.learned`; ``None`` where K or the accuracies are unknown), the mean
    ``final_train_loss`` and ``chance`` ``ln K``, the loss of the uniform prediction that the curves are drawn
    against."""
    classes = classes if classes is not None else class_counts(runs)
    columns = [*CELL, "n", "test_accuracy", "chance_accuracy", "p_above_chance", "learned", "final_train_loss",
               "chance"]
    if "test_accuracy" not in runs.columns:
        return pd.DataFrame(columns=columns)
    ok = runs[runs["status"] == "ok"]
    losses = ok["final_train_loss"].astype(float).tolist() if "final_train_loss" in ok else [math.nan] * len(ok)
    # Plain lists, not a frame per cell: at thousands of cells pandas' per-group slicing cost seconds.
    cells: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for *key, accuracy, loss in zip(*(ok[c].tolist() for c in cell_columns(ok)),
                                    ok["test_accuracy"].astype(float).tolist(), losses, strict=True):
        if all(isinstance(part, str) for part in key):
            cells.setdefault(tuple(key), []).append((accuracy, loss))
    rows = []
    for (model, dataset, regularizer), values in sorted(cells.items()):
        # Sorted, so that the sums and the p-value do not depend on the order the runs were read in.
        accuracies = np.asarray([a for a, _ in values], dtype=float)
        accuracies = np.sort(accuracies[~np.isnan(accuracies)])
        train = np.sort(np.asarray([loss for _, loss in values], dtype=float))
        k = classes.get(dataset, -1)
        chance = 1 / k if k >= 2 else math.nan
        mean = float(accuracies.mean()) if len(accuracies) else math.nan
        p = (float(sps.ttest_1samp(accuracies, chance, alternative="greater").pvalue)
             if len(accuracies) > 1 and np.ptp(accuracies) > 1e-9 and math.isfinite(chance) else math.nan)
        learned = None
        if len(accuracies) and math.isfinite(chance):
            learned = bool(p < ALPHA) if math.isfinite(p) else bool(mean > chance)
        rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "n": len(accuracies),
                     "test_accuracy": mean, "chance_accuracy": chance, "p_above_chance": p, "learned": learned,
                     "final_train_loss": float(np.nanmean(train)) if np.isfinite(train).any() else math.nan,
                     "chance": chance_loss(k) if k >= 2 else math.nan})
    return pd.DataFrame(rows, columns=columns)


def flags(check: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """``(model, dataset, regularizer)`` -> the flag text of every cell of :func:`learning_check` that did not learn."""
    return {(r.model, r.dataset, r.regularizer):
            f"{FLAG}: test accuracy {r.test_accuracy:.3f} over {r.n} seed(s) vs chance 1/K = {r.chance_accuracy:.3f}"
            + (f" (one-sided p {r.p_above_chance:.3g})" if math.isfinite(r.p_above_chance) else "")
            for r in check.itertuples(index=False) if r.learned is False}


def curve_runs(runs: pd.DataFrame, check: pd.DataFrame, *, flagged_only: bool = False,
               limit: int = CURVE_PAIRS) -> list[str]:
    """The runs whose curves a report reads: the ``ok`` run of the lowest seed of each cell, for the (model,
    dataset) pairs with a cell that did not learn (``check`` from :func:`learning_check`), then, unless
    ``flagged_only``, the other pairs in name order, at most ``limit`` pairs."""
    cell = cell_columns(runs)
    ok = runs[runs["status"] == "ok"].sort_values([*cell, "seed"], kind="stable").drop_duplicates(cell)
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
    ok = runs[runs["status"] == "ok"]
    ok = pd.concat([ok[["run_id", "model", "dataset"]], row_names(ok)], axis=1)
    merged = curves.merge(ok, on="run_id")
    grouped = merged.groupby([*CELL, "epoch"], sort=True)
    out = grouped[list(CURVE_KEYS)].mean()
    out["n"] = grouped.size()
    return out.reset_index()
