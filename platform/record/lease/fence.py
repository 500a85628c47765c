"""Fencing: the writes of a driver, and of its trials, go through only while its lease is the study's newest and
still its own.

Epoch ``n`` of a study's lease (:mod:`~ndebench.platform.record.lease.ledger`) is the fencing token of the driver
that claimed it. That driver is fenced once any valid claim of a higher epoch exists in an active lease run
(another driver took the study over, or someone with write access to the study made one), or once its own claim
no longer stands under its own id (its lease run deleted, its record released or gone): every write of the driver
and of its trials (a :class:`FencedClient` checks before each) then raises :class:`LeaseLostError` instead, and
the driver exits 3.

A check reads the store at most once per ``max_age_s`` (the heartbeat's interval): a write within that time of
the last read goes through on its verdict, so a trial of a driver just taken over may still log an epoch. What
counts never rests on that: a trial reads afresh before it makes or continues its run and before it writes its
result, and its result carries ``ndebench.result_lease`` (the writer's epoch), so a result written into a run a
newer driver had already continued is the lost driver's and is not counted
(:func:`~ndebench.platform.record.completeness.current`).
Releases before the lease moved into the study's experiment took experiments ``S::lease::<n>``; a driver of this
release keeps one alive while it runs, so that their drivers are refused
(:mod:`~ndebench.platform.record.lease.legacy`), and :func:`is_lease` keeps them out of the list of studies.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ndebench.platform.failures.outage import InfrastructureError
from ndebench.platform.record.lease.ledger import claims, lease_runs

LEASE = "::lease::"
# MlflowClient methods that change the store: every one is checked; reads pass straight through.
WRITES = ("create_", "log_", "set_", "delete_", "update_", "restore_", "rename_")
_DRIVER: list[Fence] = []  # the fence of the lease this process's driver holds


class LeaseLostError(InfrastructureError):
    """This driver's lease of its study was taken over or removed: it writes nothing more (exit 3)."""


def lease_name(study: str, epoch: int) -> str:
    """The experiment that is epoch ``epoch`` of ``study``'s lease in the format of releases before the lease
    moved into the study."""
    return f"{study}{LEASE}{epoch}"


def is_lease(experiment_name: str) -> bool:
    """Whether an experiment is an old-style lease, not a study."""
    return LEASE in experiment_name


class Fence:
    """The check of epoch ``epoch`` of ``study``'s lease, claimed with id ``lease_id`` (``""``: any id, for runs
    written before claims had one) in experiment ``experiment_id`` (``None``: the one named ``study`` at the first
    check): :meth:`check` reads the experiment and its lease runs (two requests) and raises :class:`LeaseLostError`
    once the experiment is renamed, a valid claim of a higher epoch exists or this epoch's claim no longer stands;
    from then on it raises without reading. A verdict that the lease holds stands for ``max_age_s`` seconds
    (0: every check reads) unless ``check(fresh=True)``."""

    def __init__(self, mlflow_client: Any, study: str, epoch: int, lease_id: str = "", max_age_s: float = 0.0,
                 experiment_id: str | None = None):
        self.client, self.study, self.epoch, self.lease_id = mlflow_client, study, epoch, lease_id
        self.max_age_s = max_age_s
        self.lost: LeaseLostError | None = None
        self._experiment_id = experiment_id
        self._held_at: float | None = None  # time.monotonic() of the last read that found the lease held

    def check(self, fresh: bool = False) -> None:
        if self.lost is None and (fresh or self._held_at is None
                                  or time.monotonic() - self._held_at >= self.max_age_s):
            read_at = time.monotonic()
            why = self.verdict()
            if why is not None:
                self.lose(why)
            else:
                self._held_at = read_at
        if self.lost is not None:
            raise self.lost

    def verdict(self) -> str | None:
        """Why this epoch no longer holds the study (one line), ``None`` while it does."""
        if self._experiment_id is None:
            experiment = self.client.get_experiment_by_name(self.study)
            if experiment is None:
                return f"the study's experiment {self.study!r} no longer exists"
            self._experiment_id = experiment.experiment_id
        else:
            experiment = self.client.get_experiment(self._experiment_id)
        if experiment.name != self.study:
            return (f"the study's experiment (id {self._experiment_id}) was renamed to {experiment.name!r}; it "
                    f"stopped writing (rename it back to {self.study!r} and --resume continues it)")
        found = claims(lease_runs(self.client, self._experiment_id))
        newer = [c for c in found if c.valid and c.active and c.epoch > self.epoch]
        if newer:
            top = max(newer, key=lambda c: c.epoch)
            return (f"driver {top.holder} took it over (lease epoch {top.epoch}); it stopped writing, and the study "
                    "goes on under that driver")
        own = [c for c in found if c.epoch == self.epoch and c.id and (not self.lease_id or c.id == self.lease_id)]
        if not own:
            why = f"its lease record (epoch {self.epoch}) is gone from the study's lease runs"
        elif not any(c.active for c in own):
            why = f"its lease run {own[0].run_id} was deleted"
        elif all(c.released for c in own):
            why = "its lease record was marked released while it ran"
        else:
            return None
        return f"{why}; it stopped writing, and no driver holds the study now (--resume continues it)"

    def lose(self, why: str) -> None:
        """Mark the lease lost for ``why``; every later :meth:`check` raises."""
        self.lost = LeaseLostError(f"this driver lost its lease of study {self.study!r} (epoch {self.epoch}): {why}")


class FencedClient:
    """An ``MlflowClient`` whose writes call ``check`` first (it raises when the writer is fenced)."""

    def __init__(self, inner: Any, check: Callable[[], None]):
        self._inner, self._check = inner, check

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if not name.startswith(WRITES):
            return attribute

        def fenced(*args: Any, **kwargs: Any) -> Any:
            self._check()
            return attribute(*args, **kwargs)

        return fenced


def fence_writes(fence: Fence | None) -> None:
    """From now on :func:`fenced` clients (every :func:`~ndebench.platform.record.store.client`) check
    ``fence`` (the driver's) before each write; ``None`` ends that."""
    _DRIVER[:] = [fence] if fence else []


def fenced(mlflow_client: Any, check: Callable[[], None] | None = None) -> Any:
    """``mlflow_client`` with its writes checked by ``check``, else by the driver's fence (:func:`fence_writes`)."""
    check = check or (_DRIVER[0].check if _DRIVER else None)
    return FencedClient(mlflow_client, check) if check else mlflow_client


def raise_if_driver_lost() -> None:
    """Raise what the driver's fence found last, without reading the store."""
    if _DRIVER and _DRIVER[0].lost is not None:
        raise _DRIVER[0].lost
