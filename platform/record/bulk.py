"""A finished trial written as one MLflow run in a few requests: the layout :class:`TrialRecorder` writes
epoch by epoch (its tags, params, per-epoch metrics, final metrics with the run summaries, JSON artifacts),
for runs whose whole history is known at once (synthetic studies, imports)."""
from __future__ import annotations

import time
from typing import Any

from ndebench.platform.record.recorder import trial_run_tags
from ndebench.platform.record.schema import TAG, mlflow_end
from ndebench.platform.record.store import retry
from ndebench.platform.record.summaries import RESULTS_DIGEST, record_digest
from ndebench.platform.record.tracking import run_name

# MLflow takes at most 1000 metrics in one log_batch.
BATCH = 1000


def write_trial(mlflow_client: Any, experiment_id: str, *, config: dict[str, Any], config_hash: str,
                tags: dict[str, str], parent_run_id: str | None, epochs: list[dict[str, float]], status: str,
                final: dict[str, float], final_tags: dict[str, str], artifacts: dict[str, Any]) -> str:
    """Record one ended trial: ``epochs`` (per-epoch metrics, step 1, 2, ...), ``final`` metrics (at step 0, those
    without a per-epoch history, as :meth:`TrialRecorder.finish`), ``status`` and
    ``final_tags`` (``ndebench.`` prefixed; the run's digest beside them,
    :func:`~ndebench.platform.record.summaries.record_digest`), ``artifacts`` (name -> JSON payload);
    returns the run id. Four requests plus one per artifact."""
    from mlflow.entities import Metric, Param, RunTag

    all_tags = trial_run_tags(tags, config_hash, parent_run_id)
    name = run_name({**config, "regularizer": tags["regularizer"], "phase": tags["phase"], "seed": tags["seed"]})
    run_id = retry(lambda: mlflow_client.create_run(experiment_id, tags=all_tags, run_name=name)).info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(k, float(v), now, step) for step, record in enumerate(epochs, start=1) for k, v in record.items()]
    history = {k for record in epochs for k in record}
    metrics += [Metric(k, float(v), now, 0) for k, v in final.items() if k not in history]
    ended = {f"{TAG}status": status, **{f"{TAG}{k}": str(v) for k, v in final_tags.items()}}
    stored = {k: str(v) for k, v in sorted(config.items())}
    ended[f"{TAG}{RESULTS_DIGEST}"] = record_digest(final, all_tags | ended, stored)
    params = [Param(k, v) for k, v in stored.items()]
    for start in range(0, max(len(metrics), 1), BATCH):
        chunk = metrics[start:start + BATCH]
        first = start == 0
        retry(lambda chunk=chunk, first=first: mlflow_client.log_batch(
            run_id, metrics=chunk, params=params if first else [],
            tags=[RunTag(k, v) for k, v in ended.items()] if first else []))
    for artifact, payload in artifacts.items():
        retry(lambda artifact=artifact, payload=payload: mlflow_client.log_dict(run_id, payload, artifact))
    retry(lambda: mlflow_client.set_terminated(run_id, mlflow_end(status)))
    return run_id
