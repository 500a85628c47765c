"""The lease of the older format, kept alive beside the study's own so that a driver of an older release is refused.

Releases before the lease moved into the study's experiment took epoch ``n`` of study ``S`` as the experiment
``S::lease::<n>`` (tags ``ndebench.lease.holder``, ``ndebench.lease.machine``, counter ``ndebench.lease.beat``,
``ndebench.lease.released``), and see nothing of the study's own lease. A driver of this release makes the
experiment one above the newest such name while it holds the study, increments its counter with its own and
deletes it when it ends: an older driver started meanwhile finds it held and moving and exits 2. Anyone may create
such a name, and an older driver reads only the newest (a still one, a stranger's, it takes over): so at every beat
this driver makes its own the newest again (:func:`outbid_old_lease`), which also fences an older driver that took
one (a newer name fences it). Names that are no epoch (:func:`~ndebench.platform.record.lease.ledger.epoch_of`) are
ignored; a name taken first by someone else leaves this driver without the older lease (one line says so), never
stops it.
"""
from __future__ import annotations

import contextlib
from typing import Any

from ndebench.platform.record.lease.fence import LEASE, lease_name
from ndebench.platform.record.lease.ledger import epoch_of
from ndebench.platform.record.schema import TAG

HOLDER = f"{TAG}lease.holder"
MACHINE = f"{TAG}lease.machine"
BEAT = f"{TAG}lease.beat"
RELEASED = f"{TAG}lease.released"


def old_lease_experiments(mlflow_client: Any, study: str) -> list[tuple[int, Any]]:
    """``(epoch, experiment)`` of the study's experiments of the older format, deleted ones included; a name whose
    end is no epoch is ignored."""
    from mlflow.entities import ViewType

    found, page_token = [], None
    while True:
        page = mlflow_client.search_experiments(view_type=ViewType.ALL, filter_string=f"name LIKE '{study}{LEASE}%'",
                                                page_token=page_token)
        ends = [(epoch_of(e.name[len(study) + len(LEASE):]), e) for e in page if e.name.startswith(study + LEASE)]
        found += [(epoch, e) for epoch, e in ends if epoch is not None]
        page_token = page.token
        if not page_token:
            return found


def keep_old_lease(mlflow_client: Any, study: str, holder: str, machine: str, say: Any) -> str | None:
    """Tidy the study's older-format experiments away (the active ones this user may delete) and make the one above
    the newest, held by ``holder``; its id, ``None`` where it could not be made."""
    old = old_lease_experiments(mlflow_client, study)
    for _, experiment in old:
        if experiment.lifecycle_stage == "active" and experiment.tags.get(f"{TAG}kind") == "lease":
            with contextlib.suppress(Exception):  # only tidies the experiment list
                mlflow_client.delete_experiment(experiment.experiment_id)
    name = lease_name(study, 1 + max((n for n, _ in old), default=0))
    try:
        return mlflow_client.create_experiment(name, tags={
            HOLDER: holder, MACHINE: machine, BEAT: "0", f"{TAG}kind": "lease",
            "mlflow.note.content": f"ndebench's one-driver lock of study {study} in the format of releases before "
                                   "the lease moved into the study: it keeps their drivers out; not a study"})
    except Exception as exc:  # noqa: BLE001 - a name taken, or a store that refuses: the study's own lease holds
        say(f"the lease of the older format ({name!r}) could not be made ({str(exc).splitlines()[0][:120]}): a "
            "driver of a release before this one would not see this driver")
        return None


def outbid_old_lease(mlflow_client: Any, study: str, experiment_id: str) -> str:
    """Keep the older-format lease ``experiment_id`` the study's newest: where a name above it exists (made by
    anyone, or by an older driver that took it), make the one above that, held by the same holder, and delete
    ``experiment_id``; the id now held (``experiment_id`` where nothing is above it or the new name could not be
    made)."""
    old = old_lease_experiments(mlflow_client, study)
    own = next((n for n, e in old if e.experiment_id == experiment_id), None)
    if own is None or own == max(n for n, _ in old):
        return experiment_id
    tags = mlflow_client.get_experiment(experiment_id).tags
    name = lease_name(study, 1 + max(n for n, _ in old))
    try:
        made = mlflow_client.create_experiment(name, tags={
            k: tags[k] for k in (HOLDER, MACHINE, f"{TAG}kind", "mlflow.note.content") if k in tags} | {BEAT: "0"})
    except Exception:  # noqa: BLE001 - taken meanwhile: the next beat outbids again
        return experiment_id
    end_old_lease(mlflow_client, experiment_id)
    return made


def beat_old_lease(mlflow_client: Any, experiment_id: str, count: int) -> None:
    mlflow_client.set_experiment_tag(experiment_id, BEAT, str(count))


def end_old_lease(mlflow_client: Any, experiment_id: str) -> None:
    """Mark the older-format lease released and delete it (an older driver reads deleted ones as free)."""
    with contextlib.suppress(Exception):
        mlflow_client.set_experiment_tag(experiment_id, RELEASED, "1")
    with contextlib.suppress(Exception):
        mlflow_client.delete_experiment(experiment_id)
