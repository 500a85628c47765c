"""Runs cut off by a stop of the sweep: a signal (Ctrl-C, SIGTERM, SIGHUP) or the loss of the driver.

Every run of the study still running is closed as ``interrupted`` (MLflow ``KILLED``) with the tag
``ndebench.interruption`` saying what stopped it. A trial run whose result was written (``ndebench.status`` ok,
diverged, error or timeout: its metrics come before that tag) but that the stop caught before MLflow's own status
is only terminated with its result's status. An interrupted trial keeps its checkpoints: ``--resume``
continues its run from the newest one (the tag stays, as the run's history), and an interrupted cell is
searched or evaluated on from what ended.
"""
from __future__ import annotations

from typing import Any

from ndebench.platform.record.schema import COUNTED_STATUSES, TAG, mlflow_end
from ndebench.platform.record.store import client, retry
from ndebench.platform.record.tracking import run_status, search

INTERRUPTION = f"{TAG}interruption"


def mark_interrupted(uri: str, study: str, cause: str) -> int:
    """Close every run of ``study`` still running (trial, cell and study runs) as ``interrupted`` by ``cause``;
    return how many."""
    mlflow_client = client(uri)
    return sum(_close(mlflow_client, run, cause) for run in search(uri, study))


def interrupt_run(uri: str, run_id: str, cause: str) -> bool:
    """Close one run as ``interrupted`` by ``cause`` if it is still running (a trial whose retries an
    infrastructure failure spent: ``--resume`` continues it from its checkpoint); whether it was."""
    mlflow_client = client(uri)
    return _close(mlflow_client, retry(lambda: mlflow_client.get_run(run_id)), cause)


def _close(mlflow_client: Any, run: Any, cause: str) -> bool:
    """Close ``run`` as interrupted if it is still running; a trial run with its result written is only
    terminated. Whether it was closed as interrupted."""
    from mlflow.entities import RunTag

    status, run_id = run_status(run), run.info.run_id
    if status in COUNTED_STATUSES and run.info.status == "RUNNING" and run.data.tags.get(f"{TAG}kind") == "trial":
        retry(lambda: mlflow_client.set_terminated(run_id, mlflow_end(status)))
        return False
    if status != "running" and run.info.status != "RUNNING":
        return False
    tags = [RunTag(f"{TAG}status", "interrupted"), RunTag(INTERRUPTION, cause[:500])]
    retry(lambda: mlflow_client.log_batch(run_id, tags=tags))
    retry(lambda: mlflow_client.set_terminated(run_id, "KILLED"))
    return True
