"""Fencing: the writes of a driver, and of its trials, go through only while its lease is the study's newest.

The lease of study ``S`` is a series of MLflow experiments ``S::lease::1``, ``S::lease::2``, ...
(:mod:`ndebench.platform.record.heartbeat` takes them); the epoch ``n`` of a driver's lease is its fencing
token. A driver is fenced once ``S::lease::<n+1>`` exists: another driver took the study over, and every write
of the old one (a :class:`FencedClient` checks before each) raises :class:`LeaseLostError` instead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ndebench.platform.failures.outage import InfrastructureError
from ndebench.platform.record.schema import TAG

LEASE = "::lease::"
HOLDER = f"{TAG}lease.holder"
# MlflowClient methods that change the store: every one is checked; reads pass straight through.
WRITES = ("create_", "log_", "set_", "delete_", "update_", "restore_", "rename_")
_DRIVER: list[Fence] = []  # the fence of the lease this process's driver holds


class LeaseLostError(InfrastructureError):
    """This driver's lease of its study was taken over by another driver: it writes nothing more (exit 3)."""


def lease_name(study: str, epoch: int) -> str:
    """The experiment that is epoch ``epoch`` of ``study``'s lease."""
    return f"{study}{LEASE}{epoch}"


def is_lease(experiment_name: str) -> bool:
    """Whether an experiment is a lease, not a study."""
    return LEASE in experiment_name


class Fence:
    """The check of lease ``epoch`` of ``study``: :meth:`check` raises :class:`LeaseLostError` once epoch
    ``epoch + 1`` exists (one read of the store), and from then on without reading."""

    def __init__(self, mlflow_client: Any, study: str, epoch: int):
        self.client, self.study, self.epoch = mlflow_client, study, epoch
        self.lost: LeaseLostError | None = None

    def check(self) -> None:
        if self.lost is None:
            newer = self.client.get_experiment_by_name(lease_name(self.study, self.epoch + 1))
            if newer is not None:
                self.lose(f"driver {newer.tags.get(HOLDER, '?')} took it over (lease epoch {self.epoch + 1})")
        if self.lost is not None:
            raise self.lost

    def lose(self, why: str) -> None:
        """Mark the lease lost for ``why``; every later :meth:`check` raises."""
        self.lost = LeaseLostError(f"this driver lost its lease of study {self.study!r} (epoch {self.epoch}): {why}; "
                                   "it stopped writing, and the study goes on under the other driver")


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
    """From now on :func:`fenced` clients (every :func:`~ndebench.platform.record.tracking.client`) check
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
