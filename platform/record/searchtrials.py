"""The trial runs of a study's search stages as the driver reads them back to continue a search, and the one
place a search cell is written ``done``.

A search trial's run holds its flat config as params (``str(value)``), ``ndebench.status`` and, once it ended
``ok``, ``result_<key>`` final metrics: the validation values the trial reported to Ray Tune (its selected
epoch's, where the per-epoch ``val_*`` metrics keep the last epoch's). Runs recorded before those metrics
existed give the value logged at step 0, one request per run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ndebench.platform.record.schema import SPENT_STATUSES, SUPERSEDED, TAG
from ndebench.platform.record.store import client, retry
from ndebench.platform.record.tracking import finish_cell, run_status, search

RESULT_PREFIX = "result_"


@dataclass(frozen=True)
class SearchTrial:
    """One search trial run: its id, logged ``params`` (strings), status and start time (ms)."""

    run_id: str
    params: dict[str, str]
    status: str
    start_time: int
    metrics: dict[str, float]

    def score(self, uri: str, metric: str) -> float | None:
        """The value the search ranks this trial by (``metric`` as the trial reported it), ``None`` unless ok."""
        if self.status != "ok":
            return None
        if f"{RESULT_PREFIX}{metric}" in self.metrics:
            return self.metrics[f"{RESULT_PREFIX}{metric}"]
        final = [m.value for m in client(uri).get_metric_history(self.run_id, metric) if m.step == 0]
        return final[-1] if final else None


def search_trials(uri: str, study: str, phase: str) -> dict[str, list[SearchTrial]]:
    """The trial runs of search stage ``phase`` by cell key, oldest first, without those of a search that
    failed and was started over (:func:`retire`)."""
    grouped: dict[str, list[SearchTrial]] = {}
    for run in search(uri, study, f"tags.`{TAG}phase` = '{phase}' and tags.`{TAG}kind` = 'trial'"):
        cell = run.data.tags.get(f"{TAG}cell")
        if cell and not run.data.tags.get(SUPERSEDED):
            grouped.setdefault(cell, []).append(SearchTrial(run.info.run_id, dict(run.data.params), run_status(run),
                                                            run.info.start_time or 0, dict(run.data.metrics)))
    for trials in grouped.values():
        trials.sort(key=lambda t: t.start_time)
    return grouped


def retire(uri: str, trials: list[SearchTrial], cell_run_id: str) -> None:
    """The trials of a cell whose search failed, before ``--resume`` searches it again from the start: tagged
    ``ndebench.superseded_by`` (the cell run), so that the new search neither counts nor chooses them."""
    from mlflow.entities import RunTag

    mlflow_client = client(uri)
    for trial in trials:
        retry(lambda t=trial: mlflow_client.log_batch(t.run_id, tags=[RunTag(SUPERSEDED, cell_run_id)]))


class IncompleteSearchError(RuntimeError):
    """A search cell would be written ``done`` before its budget was spent."""


def finish_search_cell(uri: str, run_id: str, *, spent: int, budget: int, params: dict[str, Any],
                       metrics: dict[str, float]) -> None:
    """Write a search cell ``done`` with its chosen values: only once ``spent`` (trials that ended: ok,
    diverged, error, timeout or stopped by ASHA) reaches its ``budget``; else
    :class:`IncompleteSearchError`, and the cell stays as it was."""
    if spent < budget:
        raise IncompleteSearchError(f"cell run {run_id}: {spent} of {budget} trial(s) ended "
                                    f"({', '.join(SPENT_STATUSES)}); a search cell is done only when all did")
    finish_cell(uri, run_id, "done", params=params, metrics=metrics)
