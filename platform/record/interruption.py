"""Runs cut off by a stop of the sweep: a signal (Ctrl-C, SIGTERM, SIGHUP) or the loss of the driver.

Every run of the study still running is closed as ``interrupted`` (MLflow ``KILLED``) with the tag
``ndebench.interruption`` saying what stopped it. An interrupted trial keeps its checkpoints: ``--resume``
continues its run from the newest one (the tag stays, as the run's history), and an interrupted cell is
searched or evaluated on from what ended.
"""
from __future__ import annotations

from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import client, retry, run_status, search

INTERRUPTION = f"{TAG}interruption"


def mark_interrupted(uri: str, study: str, cause: str) -> int:
    """Close every run of ``study`` still running (trial, cell and study runs) as ``interrupted`` by ``cause``;
    return how many."""
    from mlflow.entities import RunTag

    mlflow_client, closed = client(uri), 0
    for run in search(uri, study):
        if run_status(run) != "running" and run.info.status != "RUNNING":
            continue
        run_id = run.info.run_id
        tags = [RunTag(f"{TAG}status", "interrupted"), RunTag(INTERRUPTION, cause[:500])]
        retry(lambda run_id=run_id, tags=tags: mlflow_client.log_batch(run_id, tags=tags))
        retry(lambda run_id=run_id: mlflow_client.set_terminated(run_id, "KILLED"))
        closed += 1
    return closed


def interrupt_run(uri: str, run_id: str, cause: str) -> bool:
    """Close one run as ``interrupted`` by ``cause`` if it is still running (a trial whose retries an
    infrastructure failure spent: ``--resume`` continues it from its checkpoint); whether it was."""
    from mlflow.entities import RunTag

    mlflow_client = client(uri)
    run = retry(lambda: mlflow_client.get_run(run_id))
    if run_status(run) != "running" and run.info.status != "RUNNING":
        return False
    tags = [RunTag(f"{TAG}status", "interrupted"), RunTag(INTERRUPTION, cause[:500])]
    retry(lambda: mlflow_client.log_batch(run_id, tags=tags))
    retry(lambda: mlflow_client.set_terminated(run_id, "KILLED"))
    return True
