"""The study's runs as one analysis frame: identity tags, variant, regularizer parameters, test metrics and
per-epoch training time, read from MLflow.

Columns: ``run_id, parent_run_id, study, model, dataset, regularizer, variant, label, seed, status, n_mc``,
``metric`` (the dataset's registered primary metric, tag ``ndebench.metric``; ``""`` on older runs),
``p, m, rate`` (the regularizer's parameters from the run's params ``regularizer.p`` ...; NaN where absent),
every ``test_*`` metric, ``train_time_s`` and ``epoch_time_s`` (means over the run's epochs) and
``params`` (the run's flat config, values parsed back from strings). ``label`` is the variant label where
the run belongs to a fixed-parameter variant cell, else the regularizer.
"""
from __future__ import annotations

import ast
import math
import os
from typing import Any

import numpy as np
import pandas as pd
from ndebench.platform.record import tracking

PARAMS = ("p", "m", "rate")
TIME_METRICS = ("train_time_s", "epoch_time_s")


def parse_param(text: str) -> Any:
    """A param value logged as ``str(value)`` back to the value (``"8"`` -> 8, ``"None"`` -> None); strings
    that are no Python literal stay strings."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _mean_history(client: Any, run_id: str, key: str) -> float:
    values = [m.value for m in client.get_metric_history(run_id, key)]
    return float(np.mean(values)) if values else math.nan


def runs_frame(uri: str, study: str, phase: str = "evaluate", *, histories: bool = True) -> pd.DataFrame:
    """One row per run of ``study`` in ``phase`` (``evaluate`` or ``reevaluate``), columns as in the module
    docstring; ``histories`` reads the per-epoch time metrics (one request per run and metric)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = tracking.client(uri)
    rows = []
    for run in tracking.search(uri, study, f"tags.`{tracking.TAG}phase` = '{phase}'"):
        tags, params = run.data.tags, {k: parse_param(v) for k, v in run.data.params.items()}
        tag = lambda key, default="": tags.get(f"{tracking.TAG}{key}", default)  # noqa: E731
        row: dict[str, Any] = {
            "run_id": run.info.run_id, "parent_run_id": tags.get("mlflow.parentRunId", ""), "study": study,
            "model": tag("model"), "dataset": tag("dataset"), "regularizer": tag("regularizer"),
            "variant": tag("variant"), "seed": int(tag("seed", "-1")), "status": tag("status", "running"),
            "n_mc": int(tag("n_mc", "0") or 0), "metric": tag("metric"),
            **{name: _number(params.get(f"regularizer.{name}")) for name in PARAMS},
            **{k: v for k, v in run.data.metrics.items() if k.startswith("test_")},
            "params": params,
        }
        row["label"] = row["variant"] or row["regularizer"]
        if histories:
            row.update({key: _mean_history(client, run.info.run_id, key) if key in run.data.metrics else math.nan
                        for key in TIME_METRICS})
        rows.append(row)
    return pd.DataFrame(rows)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
