"""One driver per study: a lease in the tracking store, taken by compare-and-set, kept alive by a counter.

Epoch ``n`` of study ``S``'s lease is the MLflow experiment ``S::lease::<n>``. Experiment names are unique in
MLflow's SQL store, whether used directly or behind a tracking server, and a deleted experiment keeps its name:
creating an existing name fails with ``RESOURCE_ALREADY_EXISTS``, so of the drivers that try to create epoch
``n + 1`` exactly one succeeds. That is the compare-and-set, and ``n`` is the driver's fencing token
(:mod:`ndebench.platform.record.fence`). The holder increments the tag ``ndebench.lease.beat`` every
:func:`interval_s` and sets ``ndebench.lease.released`` when it ends; the epoch it superseded is deleted, so
that the MLflow UI lists one lease beside each study.

A driver that finds the newest epoch held watches its counter for :func:`stale_s` seconds on its own clock
(``CLOCK_BOOTTIME``, which also counts a suspended machine): a counter that moves is a live driver (refused,
exit 2), one that does not is a lost driver, taken over. No wall clock is compared across machines. A holder
on this very machine (same boot and PID namespace) whose process no longer exists is gone at once.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndebench.platform.record.fence import HOLDER, LEASE, Fence, LeaseLostError, lease_name
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import artifact_root, raw_client, retry

MACHINE = f"{TAG}lease.machine"
BEAT = f"{TAG}lease.beat"
RELEASED = f"{TAG}lease.released"
STALE_ENV = "NDEBENCH_LEASE_STALE_S"
STALE_S = 60.0


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
    """The driver that took an epoch of a lease: ``host:pid``, and where that pid means something."""

    name: str
    machine: str

    @classmethod
    def of(cls, experiment: Any) -> Holder:
        return cls(experiment.tags.get(HOLDER, "an unknown driver"), experiment.tags.get(MACHINE, ""))

    def __str__(self) -> str:
        return self.name

    def gone_here(self) -> bool:
        """Certainly gone: it ran in this boot and PID namespace, and its pid is this process or no process."""
        host, _, pid = self.name.rpartition(":")
        if not (self.machine and self.machine == _machine() and host == socket.gethostname() and pid.isdigit()):
            return False
        return int(pid) == os.getpid() or not _pid_exists(int(pid))


def _epoch(experiment: Any, study: str) -> int:
    rest = experiment.name[len(study) + len(LEASE):]
    return int(rest) if experiment.name.startswith(study + LEASE) and rest.isdigit() else 0


def _newest(mlflow_client: Any, study: str) -> Any:
    """The newest epoch's experiment of ``study``'s lease (deleted ones included), or ``None``."""
    from mlflow.entities import ViewType

    found, token = [], None
    while True:
        page = mlflow_client.search_experiments(view_type=ViewType.ALL, filter_string=f"name LIKE '{study}{LEASE}%'",
                                                page_token=token)
        found += [e for e in page if _epoch(e, study)]
        token = page.token
        if not token:
            return max(found, key=lambda e: _epoch(e, study), default=None)


def _held(experiment: Any) -> bool:
    return experiment.lifecycle_stage == "active" and RELEASED not in experiment.tags


def _beating(mlflow_client: Any, experiment: Any, stale: float) -> bool:
    """Whether the counter of a held lease moves within ``stale`` seconds of this process's clock."""
    first, start = experiment.tags.get(BEAT), _clock()
    while _clock() - start < stale:
        time.sleep(interval_s(stale) / 4)
        now = mlflow_client.get_experiment_by_name(experiment.name)
        if now is None or not _held(now):
            return False
        if now.tags.get(BEAT) != first:
            return True
    return False


def conflict(study: str, holder: Holder, stale: float) -> DriverConflictError:
    host, _, pid = holder.name.rpartition(":")
    return DriverConflictError(
        f"study {study!r} is being run by another driver, {holder}; wait for it to end, stop it (Ctrl-C, or kill "
        f"{pid} on {host}), or choose a new study name (a driver that died frees the study once its lease's "
        f"heartbeat has not moved for {stale:.0f} s)")


class Lease:
    """Epoch :attr:`epoch` of a study's lease, held by this process, its counter incremented from a daemon
    thread until :meth:`release`. :attr:`fence` checks it is still the newest epoch."""

    def __init__(self, uri: str, study: str, epoch: int, experiment_id: str, interval: float):
        self.uri, self.study, self.epoch, self.experiment_id = uri, study, epoch, experiment_id
        self.interval = interval
        self.fence = Fence(raw_client(uri), study, epoch)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ndebench-lease", daemon=True)
        self._thread.start()

    @classmethod
    def take(cls, uri: str, study: str, say: Any) -> tuple[Lease, Holder | None]:
        """Take the study's lease; returns it and the driver it was taken from (gone), if one held it. Raises
        :class:`DriverConflictError` when a live driver holds it or another driver takes it first."""
        from mlflow.exceptions import MlflowException

        stale, mlflow_client = stale_s(), raw_client(uri)
        newest, previous = retry(lambda: _newest(mlflow_client, study)), None
        if newest is not None and _held(newest):
            previous = Holder.of(newest)
            if not previous.gone_here():
                say(f"study {study!r} is leased to driver {previous}; watching its heartbeat for up to {stale:.0f} s")
                if _beating(mlflow_client, newest, stale):
                    raise conflict(study, previous, stale)
        epoch = (_epoch(newest, study) if newest is not None else 0) + 1
        root = artifact_root(uri)
        tags = {HOLDER: f"{socket.gethostname()}:{os.getpid()}", MACHINE: _machine(), BEAT: "0",
                f"{TAG}kind": "lease", "mlflow.note.content":
                f"ndebench's one-driver lock of study {study} (epoch {epoch}); not a study, no runs"}
        try:
            experiment_id = retry(lambda: mlflow_client.create_experiment(
                lease_name(study, epoch), artifact_location=f"{root}/{study}" if root else None, tags=tags))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            raise conflict(study, Holder.of(mlflow_client.get_experiment_by_name(lease_name(study, epoch))),
                           stale) from None
        if newest is not None and newest.lifecycle_stage == "active":
            try:
                mlflow_client.delete_experiment(newest.experiment_id)
            except MlflowException:
                pass  # only tidies the UI: a newer epoch fences the old one either way
        return cls(uri, study, epoch, experiment_id, interval_s(stale)), previous

    def check(self) -> None:
        """Raise :class:`~ndebench.platform.record.fence.LeaseLostError` if another driver took the study over."""
        self.fence.check()

    def _run(self) -> None:
        from mlflow.exceptions import MlflowException

        mlflow_client, count = raw_client(self.uri), 0
        while not self._stopped.wait(self.interval):
            count += 1
            try:
                self.check()
                retry(lambda count=count: mlflow_client.set_experiment_tag(self.experiment_id, BEAT, str(count)))
            except LeaseLostError:
                return
            except MlflowException as exc:
                if exc.error_code == "INVALID_STATE":
                    self.fence.lose(f"its lease experiment {lease_name(self.study, self.epoch)} was deleted")
                    return
            except Exception:  # noqa: BLE001 - a missed beat only lets another driver take over sooner
                continue

    def release(self) -> None:
        """End the heartbeat and free the study at once, unless another driver holds it now."""
        self._stopped.set()
        self._thread.join(timeout=self.interval + 5)
        try:
            self.check()
            raw_client(self.uri).set_experiment_tag(self.experiment_id, RELEASED, "1")
        except Exception:  # noqa: BLE001 - a lease lost, or a store that is gone, is left as it is
            pass
