"""Runs and experiments deleted in MLflow (its UI's delete, ``mlflow runs delete``) under a study: found before a
sweep starts, and named when a write of the driver hits one, in one line with how to restore it.

``ndebench run`` exits 2 for them (:class:`DeletedError` is a ``RuntimeError``): the study's record changed under
it, which only a person can set right (restore, or a new study name); a retry, as after an outage (exit 3),
would meet the same deleted run. A deleted trial run needs nothing of this: its (cell, seed) has no current run
then, and ``--resume`` runs it again (:mod:`~ndebench.platform.record.completeness`).
"""
from __future__ import annotations

import re

from ndebench.platform.failures.diskfull import exception_chain
from ndebench.platform.record.lease.fence import LeaseLostError
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.store import client
from ndebench.platform.record.tracking import search

# What MLflow's stores (SQL and REST alike) say when a write meets a deleted run or experiment.
NOT_ACTIVE = re.compile(r"The (run|experiment) (\S+) must be in the 'active' state\. Current state is deleted")


class DeletedError(RuntimeError):
    """The study's experiment or one of its driver's runs is deleted in the tracking store; ``str`` is one line
    naming it and how to restore it."""


def _experiment_deleted(uri: str, study: str, experiment_id: str) -> DeletedError:
    return DeletedError(
        f"study {study!r}: its MLflow experiment (id {experiment_id}) is deleted in {uri}; restore it "
        f"(`mlflow experiments restore --experiment-id {experiment_id}`, or the MLflow UI) and run again with "
        "--resume, or choose a new study name")


def _run_deleted(uri: str, study: str, run_id: str, what: str) -> DeletedError:
    return DeletedError(
        f"study {study!r}: its {what} {run_id} is deleted in {uri}; restore it (`mlflow runs restore --run-id "
        f"{run_id}`, or the MLflow UI) and run again with --resume, or choose a new study name")


def check_not_deleted(uri: str, study: str) -> None:
    """:class:`DeletedError` when the study's experiment, or its study run (with no live one beside it), is
    deleted; nothing for a study not yet recorded."""
    from mlflow.entities import ViewType

    mlflow_client = client(uri)
    experiment = mlflow_client.get_experiment_by_name(study)
    if experiment is None:
        return
    if experiment.lifecycle_stage == "deleted":
        raise _experiment_deleted(uri, study, experiment.experiment_id)
    study_filter = f"tags.`{TAG}kind` = 'study'"
    if search(uri, study, study_filter):
        return
    deleted = mlflow_client.search_runs([experiment.experiment_id], filter_string=study_filter,
                                        run_view_type=ViewType.DELETED_ONLY, max_results=1)
    if deleted:
        raise _run_deleted(uri, study, deleted[0].info.run_id, "study run")


def deleted_error(exc: BaseException, uri: str, study: str) -> DeletedError | None:
    """A :class:`DeletedError` naming what ``exc`` (or an exception it came from) met deleted, else ``None``."""
    from mlflow.exceptions import MlflowException

    for error in exception_chain(exc):
        if isinstance(error, DeletedError):
            return error
        found = NOT_ACTIVE.search(str(error))
        # The lease's watcher can meet a deleted experiment first: its lease runs read as deleted.
        if found is None and not isinstance(error, LeaseLostError):
            continue
        mlflow_client = client(uri)
        experiment = mlflow_client.get_experiment_by_name(study)
        if experiment is not None and experiment.lifecycle_stage == "deleted":
            return _experiment_deleted(uri, study, experiment.experiment_id)
        if found is None:
            continue
        kind, name = found.groups()
        if kind == "experiment":
            return _experiment_deleted(uri, study, name)
        try:
            tags = mlflow_client.get_run(name).data.tags
        except MlflowException:
            tags = {}
        what = {"study": "study run", "cell": f"cell run ({tags.get(f'{TAG}cell', '?')})"}.get(
            tags.get(f"{TAG}kind", ""), "run")
        return _run_deleted(uri, study, name, what)
    return None
