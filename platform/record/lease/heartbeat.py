"""One driver per study: a lease in the study's own experiment, taken by compare-and-set, kept alive by a counter.

Epoch ``n`` of study ``S``'s lease is a claim in a lease run of ``S``'s experiment
(:mod:`~ndebench.platform.record.lease.ledger`): a param that MLflow never lets change, so of the drivers that
claim epoch ``n`` exactly one succeeds. That is the compare-and-set, and ``n`` with the claim's random id is the
driver's fencing token (:mod:`~ndebench.platform.record.lease.fence`). The holder increments its epoch's counter
every :func:`interval_s` and marks the epoch released when it ends. Only writers of the study (``EDIT`` on its
experiment under ``ndebench server --auth``) can write any of it.

A driver that finds epochs held watches all their counters for :func:`stale_s` seconds on its own clock
(``CLOCK_BOOTTIME``, which also counts a suspended machine): a counter that moves is a live driver (refused,
exit 2), none moving means the holders are lost, and the study is taken over at an epoch above every recorded
one (every claim in an active lease run, retagged or not, and every active run's ``ndebench.lease``; a record a
writer left elsewhere, or in a run an admin deleted, numbers nothing, so none locks the study for good). No wall
clock is compared across machines. A holder on this very machine (same boot and PID namespace) whose process no longer
exists is gone at once.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndebench.platform.record.lease.fence import Fence, LeaseLostError
from ndebench.platform.record.lease.ledger import (
    MAX_EPOCH,
    Claim,
    beat_tag,
    claim,
    claims,
    epoch_of,
    every_run,
    fields_of,
    is_lease_run,
    lease_runs,
    new_lease_run,
    released_tag,
    token,
    unnumbered,
)
from ndebench.platform.record.lease.legacy import beat_old_lease, end_old_lease, keep_old_lease, outbid_old_lease
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.store import ensure_experiment, raw_client, retry

STALE_ENV = "NDEBENCH_LEASE_STALE_S"
STALE_S = 60.0
# Seconds a driver that made a study's first lease run waits before listing the lease runs again: longer than
# another driver, started at the same time, takes from finding none to making its own.
SETTLE_S = 2.0


class DriverConflictError(RuntimeError):
    """Another live driver runs the study (``ndebench run`` exits 2 naming it)."""


def stale_s() -> float:
    """Seconds a lease's counter must stand still before its driver counts as lost: ``$NDEBENCH_LEASE_STALE_S``,
    else 60."""
    text = os.environ.get(STALE_ENV, "")
    try:
        value = float(text) if text else STALE_S
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"${STALE_ENV}={text!r}: expected a positive number of seconds (default {STALE_S:g})")
    return value


def interval_s(stale: float) -> float:
    """How often a holder increments its counter: every 2 s (a second driver is refused as soon as it sees the
    counter move), and at least six times per stale period."""
    return min(2.0, stale / 6)


def _clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


def _machine() -> str:
    """This boot of this machine and this PID namespace ('' where that cannot be told): pids compare only within it."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Holder:
    """The driver that claimed an epoch of a lease: ``host:pid``, and where that pid means something."""

    name: str
    machine: str

    @classmethod
    def of(cls, record: Claim | str) -> Holder:
        """The holder a claim names (a :class:`Claim`, or a claim's param value)."""
        if isinstance(record, str):
            found = fields_of(record)
            return cls(found.get("holder") or "an unknown driver", found.get("machine", ""))
        return cls(record.holder or "an unknown driver", record.machine)

    def __str__(self) -> str:
        return self.name

    def gone_here(self) -> bool:
        """Certainly gone: it ran in this boot and PID namespace, and its pid is this process or no process."""
        host, _, pid = self.name.rpartition(":")
        here = _machine()
        if not (here and self.machine == here and host == socket.gethostname() and pid.isascii() and pid.isdigit()):
            return False
        return int(pid) == os.getpid() or not _pid_exists(int(pid))


def _numbered(mlflow_client: Any, experiment_id: str, say: Any) -> list[tuple[int, str]]:
    """``(epoch, run id)`` of every claim in an active lease run of the experiment (one tagged
    ``ndebench.kind=lease``, or holding lease records only: a lease run retagged to hide it) and every active run's
    ``ndebench.lease`` (so that the trial runs of a study recorded under the older lease stay below the new epoch);
    one line names the records that name no epoch. A record in any other run (the study run, a trial run) no driver
    wrote, and a deleted run numbers nothing: deleting a run is the remedy for what it holds."""
    runs = [r for r in retry(lambda: every_run(mlflow_client, experiment_id)) if r.info.lifecycle_stage == "active"]
    odd = unnumbered(runs)
    if odd:
        run_id, key = odd[0]
        say(f"ignoring {len(odd)} lease record(s) that name no epoch (1 to {len(str(MAX_EPOCH))} ASCII digits), "
            f"e.g. {key[:40]!r}{'...' if len(key) > 40 else ''} in run {run_id}")
    tagged = [(epoch_of(r.data.tags.get(f"{TAG}lease", "")), r.info.run_id) for r in runs]
    return [(c.epoch, c.run_id) for c in claims([r for r in runs if is_lease_run(r)])] + [
        (n, run_id) for n, run_id in tagged if n is not None]


def _say_renamed(mlflow_client: Any, study: str, experiment_id: str, say: Any) -> None:
    """One line naming the experiments, other than ``experiment_id``, whose lease runs are tagged as ``study``'s: a
    study renamed away, perhaps, which this first take starts over. Informative only: anyone may make such a run, so
    the line advises nothing that would hand the study to that experiment's owner."""
    from mlflow.entities import ViewType

    others = [e for e in mlflow_client.search_experiments(view_type=ViewType.ALL, max_results=1000)
              if e.experiment_id != experiment_id]
    found = retry(lambda: mlflow_client.search_runs(
        [e.experiment_id for e in others][:100], filter_string=f"tags.`{TAG}kind` = 'lease' and "
        f"tags.`{TAG}study` = '{study}'", run_view_type=ViewType.ALL, max_results=10)) if others else []
    names = {e.experiment_id: e.name for e in others}
    for where in sorted({r.info.experiment_id for r in found}):
        say(f"this driver starts study {study!r} in experiment {experiment_id}; experiment {names[where]!r} (id "
            f"{where}) holds a lease run tagged as {study!r}'s, as a study renamed away would, but anyone may make "
            "such a run: ask an admin who made it before trusting its runs")


def _moving(mlflow_client: Any, experiment_id: str, held: list[Claim], stale: float) -> Claim | None:
    """The first of the ``held`` claims whose counter moves within ``stale`` seconds of this process's clock (a
    live driver); ``None`` when none does (or each is released or removed meanwhile)."""
    first, start = {(c.run_id, c.epoch): c.beat for c in held}, _clock()
    while first and _clock() - start < stale:
        time.sleep(interval_s(stale) / 4)
        now = {(c.run_id, c.epoch): c for c in claims(lease_runs(mlflow_client, experiment_id))}
        for key, beat in list(first.items()):
            current = now.get(key)
            if current is None or not current.held:
                del first[key]
            elif current.beat != beat:
                return current
    return None


def conflict(study: str, holder: Holder, stale: float) -> DriverConflictError:
    host, _, pid = holder.name.rpartition(":")
    return DriverConflictError(
        f"study {study!r} is being run by another driver, {holder}; wait for it to end, stop it (Ctrl-C, or kill "
        f"{pid} on {host}), or choose a new study name (a driver that died frees the study once its lease's "
        f"heartbeat has not moved for {stale:.0f} s)")


class Lease:
    """Epoch :attr:`epoch` of a study's lease, claimed by this process with id :attr:`lease_id` in the lease runs
    :attr:`run_ids` of experiment :attr:`experiment_id` (the study's at the take), its counter incremented from a
    daemon thread until :meth:`release`. :attr:`fence` checks that it still holds the study."""

    def __init__(self, uri: str, study: str, epoch: int, lease_id: str, run_ids: list[str], interval: float,
                 legacy_id: str | None = None, experiment_id: str | None = None):
        self.uri, self.study, self.epoch, self.lease_id, self.run_ids = uri, study, epoch, lease_id, run_ids
        self.interval, self.legacy_id, self.experiment_id = interval, legacy_id, experiment_id
        # The heartbeat reads the lease every interval, so the driver's own writes can rest on its last verdict.
        self.fence = Fence(raw_client(uri), study, epoch, lease_id, max_age_s=interval, experiment_id=experiment_id)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ndebench-lease", daemon=True)
        self._thread.start()

    @classmethod
    def take(cls, uri: str, study: str, say: Any) -> tuple[Lease, Holder | None]:
        """Take the study's lease (creating the study's experiment if missing); returns it and the driver it was
        taken from (gone), if one held it. Raises :class:`DriverConflictError` when a live driver holds it or
        another driver claims the same epoch first."""
        stale, mlflow_client = stale_s(), raw_client(uri)
        experiment_id = ensure_experiment(uri, study)
        found = claims(retry(lambda: lease_runs(mlflow_client, experiment_id)))
        held = [c for c in found if c.held]
        previous = Holder.of(max(held, key=lambda c: c.epoch)) if held else None
        live = [c for c in held if not Holder.of(c).gone_here()]
        if live:
            say(f"study {study!r} is leased to driver {Holder.of(max(live, key=lambda c: c.epoch))}; watching its "
                f"heartbeat for up to {stale:.0f} s")
            moving = _moving(mlflow_client, experiment_id, live, stale)
            if moving is not None:
                raise conflict(study, Holder.of(moving), stale)
        top, where = max([(c.epoch, c.run_id) for c in found if c.active]
                         + _numbered(mlflow_client, experiment_id, say), default=(0, ""))
        epoch = top + 1
        if epoch > MAX_EPOCH:
            raise DriverConflictError(
                f"study {study!r}: a lease record of epoch {top} in run {where} leaves no epoch to claim (at most "
                f"{MAX_EPOCH}); no driver counts that high, so a writer made it: an admin deletes run {where} (a "
                "deleted run numbers no epoch), or sets that run's ndebench.lease tag back, or the study goes on "
                "under a new name")
        lease_id, holder, machine = secrets.token_hex(8), f"{socket.gethostname()}:{os.getpid()}", _machine()
        run_ids = _claim_everywhere(mlflow_client, experiment_id, study, epoch,
                                    token(holder, machine or "unknown", lease_id), stale)
        legacy = keep_old_lease(mlflow_client, study, holder, machine, say)
        if epoch == 1:
            _say_renamed(mlflow_client, study, experiment_id, say)
        return cls(uri, study, epoch, lease_id, run_ids, interval_s(stale), legacy, experiment_id), previous

    def check(self) -> None:
        """Raise :class:`~ndebench.platform.record.lease.fence.LeaseLostError` if the lease no longer holds (read
        afresh)."""
        self.fence.check(fresh=True)

    def _run(self) -> None:
        mlflow_client, count = raw_client(self.uri), 0
        while not self._stopped.wait(self.interval):
            count += 1
            try:
                self.check()
                for run_id in self.run_ids:
                    retry(lambda run_id=run_id, count=count: mlflow_client.set_tag(run_id, beat_tag(self.epoch),
                                                                                   str(count)))
                if self.legacy_id:
                    self.legacy_id = outbid_old_lease(mlflow_client, self.study, self.legacy_id)
                    beat_old_lease(mlflow_client, self.legacy_id, count)
            except LeaseLostError:
                return
            except Exception:  # noqa: BLE001 - a refused beat: the fence's next read tells a removed lease from an outage
                continue

    def release(self) -> None:
        """End the heartbeat and mark this epoch released, held or not: a fenced or stopped driver's epoch is then
        no live holder that a later ``--resume`` must watch for the stale period. Only this epoch's record is
        marked; a newer driver's is left as it is."""
        self._stopped.set()
        self._thread.join(timeout=self.interval + 5)
        mlflow_client = raw_client(self.uri)
        for run_id in self.run_ids:
            with contextlib.suppress(Exception):  # a deleted lease run, or a store that is gone, is left as it is
                mlflow_client.set_tag(run_id, released_tag(self.epoch), "1")
        if self.legacy_id:
            end_old_lease(mlflow_client, self.legacy_id)


def _claim_everywhere(mlflow_client: Any, experiment_id: str, study: str, epoch: int, value: str,
                      stale: float) -> list[str]:
    """Claim ``epoch`` with ``value`` in every active lease run of the study, in run id order, until no lease run
    without the claim is left; the runs claimed. Where there is none, one is made and, after :data:`SETTLE_S`,
    the runs are listed again: two drivers of a new study that each made one then see both and meet in the first.
    Raises :class:`DriverConflictError`, releasing what it claimed, once another claim of ``epoch`` is first in
    one."""
    def listed() -> list[str]:
        return [r.info.run_id for r in lease_runs(mlflow_client, experiment_id) if r.info.lifecycle_stage == "active"]

    active = listed()
    if not active:
        retry(lambda: new_lease_run(mlflow_client, experiment_id, study))
        time.sleep(SETTLE_S)
        active = listed()
    claimed: list[str] = []
    while missing := sorted(set(active) - set(claimed)):
        for run_id in missing:
            other = retry(lambda run_id=run_id: claim(mlflow_client, run_id, epoch, value))
            if other is not None:
                for mine in claimed:
                    with contextlib.suppress(Exception):
                        mlflow_client.set_tag(mine, released_tag(epoch), "1")
                raise conflict(study, Holder.of(other), stale)
            claimed.append(run_id)
        active = listed()
    return claimed
