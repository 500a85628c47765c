"""The lease's records, kept inside the study's own experiment, so that only the study's writers can touch them.

A lease run of study ``S`` (a run of ``S``'s experiment tagged ``ndebench.kind=lease``) holds its epochs: epoch
``n`` is the param ``ndebench.lease.<n>``, a JSON object naming its ``holder`` (``host:pid``), its ``machine``
(boot and PID namespace) and a random ``id``; its counter is the tag ``ndebench.lease.<n>.beat`` and its end the
tag ``ndebench.lease.<n>.released``. MLflow never changes a logged param (``(run, key)`` is the primary key of
its SQL store, used directly or behind a tracking server), so of two drivers claiming epoch ``n`` in one lease
run exactly one succeeds: the compare-and-set. A driver claims its epoch in every lease run it sees, and again
in any that appears meanwhile, so two drivers that each made a lease run of a new study still meet in one of
them. Every write needs ``EDIT`` on the study's experiment (``ndebench server --auth``), and a lease run is no
experiment: nothing shows in the experiment list, readers of the study skip it
(:func:`~ndebench.platform.record.tracking.search`), and once the study's run exists it is that run's child
(:func:`nest_lease_runs`), folded under it in MLflow's runs table. A record without a holder, machine, id and counter is
ignored; its number still counts while its run is active, so no epoch is claimed twice unless an admin deleted
the run that held it (the remedy for a record no driver wrote). An epoch is 1 to :data:`EPOCH_DIGITS` ASCII
digits without a leading zero (:func:`epoch_of`): a record ``ndebench.lease.<anything else>`` names no epoch and
is ignored, so that no writer's record can push the next claim's key past MLflow's limit.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ndebench.platform.record.schema import PARENT, TAG

KIND = "lease"
PREFIX = f"{TAG}lease."
EPOCH_DIGITS = 9
EPOCH = re.compile(rf"[1-9][0-9]{{0,{EPOCH_DIGITS - 1}}}")
MAX_EPOCH = 10**EPOCH_DIGITS - 1


def epoch_of(text: str) -> int | None:
    """The epoch ``text`` names (1 to :data:`EPOCH_DIGITS` ASCII digits, no leading zero), else ``None``."""
    return int(text) if EPOCH.fullmatch(text) else None


def beat_tag(epoch: int) -> str:
    """The tag that counts epoch ``epoch``'s heartbeats."""
    return f"{PREFIX}{epoch}.beat"


def released_tag(epoch: int) -> str:
    """The tag that marks epoch ``epoch`` released by its holder."""
    return f"{PREFIX}{epoch}.released"


@dataclass(frozen=True)
class Claim:
    """Epoch ``epoch`` as one lease run records it: who claimed it (``holder``, ``machine``, ``id``), its counter
    (``beat``, ``None`` without one), whether it was ``released`` and whether its run is ``active`` (not deleted)."""

    epoch: int
    holder: str
    machine: str
    id: str
    beat: str | None
    released: bool
    run_id: str
    active: bool

    @property
    def valid(self) -> bool:
        """A record that names its holder, machine and id and has a counter; any other is ignored."""
        return bool(self.holder and self.machine and self.id) and self.beat is not None

    @property
    def held(self) -> bool:
        """Valid, unreleased and in a lease run that is not deleted."""
        return self.valid and self.active and not self.released


def token(holder: str, machine: str, lease_id: str) -> str:
    """The param value of a claim."""
    return json.dumps({"holder": holder, "machine": machine, "id": lease_id}, sort_keys=True)


def fields_of(value: str) -> dict[str, str]:
    """The string fields of a claim's JSON value (``{}`` for anything else)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return {k: v for k, v in parsed.items() if isinstance(v, str)} if isinstance(parsed, dict) else {}


def claims(runs: list[Any]) -> list[Claim]:
    """Every claim the lease runs ``runs`` record, valid or not."""
    found = []
    for run in runs:
        tags, active = run.data.tags, run.info.lifecycle_stage == "active"
        for key, value in run.data.params.items():
            epoch = epoch_of(key[len(PREFIX):]) if key.startswith(PREFIX) else None
            if epoch is not None:
                fields = fields_of(value)
                found.append(Claim(epoch, fields.get("holder", ""), fields.get("machine", ""), fields.get("id", ""),
                                   tags.get(beat_tag(epoch)), released_tag(epoch) in tags, run.info.run_id, active))
    return found


def is_lease_run(run: Any) -> bool:
    """A lease run: tagged ``ndebench.kind=lease``, or holding lease records and no other param (one retagged to
    hide it). A lease record in any other run (the study run, a trial run) is no driver's."""
    params = run.data.params
    return run.data.tags.get(f"{TAG}kind") == KIND or (bool(params) and all(k.startswith(PREFIX) for k in params))


def unnumbered(runs: list[Any]) -> list[tuple[str, str]]:
    """``(run_id, key)`` of every record ``ndebench.lease.<x>`` among the params of ``runs`` whose ``x`` is no
    epoch (:func:`epoch_of`): ignored."""
    return [(run.info.run_id, key) for run in runs for key in run.data.params
            if key.startswith(PREFIX) and epoch_of(key[len(PREFIX):]) is None]


def every_run(mlflow_client: Any, experiment_id: str) -> list[Any]:
    """Every run of the experiment, deleted ones and runs of any tags included (one paged search): what numbers
    the epochs, so that retagging a lease run does not free its epochs again."""
    return _paged(mlflow_client, experiment_id, "")


def lease_runs(mlflow_client: Any, experiment_id: str) -> list[Any]:
    """The lease runs of the experiment, deleted ones included (one paged search)."""
    return _paged(mlflow_client, experiment_id, f"tags.`{TAG}kind` = '{KIND}'")


def _paged(mlflow_client: Any, experiment_id: str, filter_string: str) -> list[Any]:
    from mlflow.entities import ViewType

    runs, page_token = [], None
    while True:
        page = mlflow_client.search_runs([experiment_id], filter_string=filter_string,
                                         run_view_type=ViewType.ALL, max_results=1000, page_token=page_token)
        runs += list(page)
        page_token = page.token
        if not page_token:
            return runs


def new_lease_run(mlflow_client: Any, experiment_id: str, study: str) -> str:
    """Create a lease run in the study's experiment (ended at once: it is a record, not work); its id."""
    run = mlflow_client.create_run(experiment_id, run_name="lease", tags={
        f"{TAG}kind": KIND, f"{TAG}study": study,
        "mlflow.note.content": f"ndebench's one-driver lock of study {study}: params ndebench.lease.<epoch> name "
                               "each driver that held it; not a trial, no results"})
    mlflow_client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def nest_lease_runs(mlflow_client: Any, experiment_id: str, parent_run_id: str) -> None:
    """Make every active lease run of the experiment a child of the study's run ``parent_run_id`` (MLflow's tag
    ``mlflow.parentRunId``): the UI's runs table then folds it under the study run instead of listing it beside
    it. Readers find lease runs by their kind, never by their parent."""
    for run in lease_runs(mlflow_client, experiment_id):
        if run.info.lifecycle_stage == "active" and run.data.tags.get(PARENT) != parent_run_id:
            mlflow_client.set_tag(run.info.run_id, PARENT, parent_run_id)


def claim(mlflow_client: Any, run_id: str, epoch: int, value: str) -> str | None:
    """Log ``value`` as epoch ``epoch``'s claim in lease run ``run_id``, with its counter at 0; ``None`` when
    this claim holds there, else the claim that was there first (its param value)."""
    from mlflow.entities import Param, RunTag
    from mlflow.exceptions import MlflowException

    key = f"{PREFIX}{epoch}"
    try:
        mlflow_client.log_batch(run_id, params=[Param(key, value)], tags=[RunTag(beat_tag(epoch), "0")])
        return None
    except MlflowException:
        # Another claim was first, or this one landed and its answer was lost: the stored value says which.
        stored = mlflow_client.get_run(run_id).data.params.get(key)
        if stored is None:
            raise
        if stored != value:
            return stored
        mlflow_client.set_tag(run_id, beat_tag(epoch), "0")
        return None
