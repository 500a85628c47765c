"""Which failures are the infrastructure's rather than the method's, inside a trial and on the driver alike.

A trial whose tracking store (MLflow's REST client after its retries: connection errors, 5xx answers; a database
that cannot be reached or written), storage or local disk fails did not fail as a method: its run is not closed
``error``, it counts in no table and against no search budget. The trainable raises
:class:`TrialInfrastructureError` instead, so that Ray retries the trial from its last checkpoint into the same
MLflow run (``tune.max_failures``); once the retries are spent, the driver closes the run ``interrupted``
(``--resume`` continues it) and ``ndebench run`` exits 3 naming the failure
(:mod:`ndebench.platform.failures.exitcodes`).
"""
from __future__ import annotations

import errno
import functools
import re
from collections.abc import Callable
from typing import Any

from ndebench.platform.failures.diskfull import disk_full, exception_chain, is_disk_full
from ndebench.platform.failures.outage import InfrastructureError, cause_line, outage

# A disk or a network file system that cannot take the write, as opposed to a path the user got wrong (ENOENT,
# EACCES, EISDIR: bad input).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ESTALE, errno.ENOLCK,
                         errno.ETIMEDOUT, errno.ENOTCONN, errno.EHOSTDOWN, errno.EHOSTUNREACH, errno.ENETDOWN,
                         errno.ENETUNREACH, errno.ECONNRESET, errno.ECONNABORTED})
# MLflow's REST client says "API request to <url> failed ..." for transport errors, retries spent on 5xx answers
# and non-JSON answers; a 4xx among those is a refused request (credentials, permissions), not an outage.
CLIENT_ERROR = re.compile(r"error code 4\d\d\b")
# How a trial's error reads in Ray's text of it (error.txt): the last line of the traceback.
RAISED = re.compile(r"TrialInfrastructureError: (.*)$", re.MULTILINE)
RUN_SUFFIX = re.compile(r" \(run ([0-9a-f]{32})\)$")


class TrialInfrastructureError(InfrastructureError):
    """Raised out of the trainable for an infrastructure failure inside a trial, so that Ray retries the trial from
    its checkpoint; ``str``: one line naming what failed, and the trial's MLflow run where it has one."""


def _store_failed(exc: BaseException) -> bool | None:
    """Whether the tracking store failed (``True``) or refused the request (``False``: credentials, permissions, a
    bad request) in ``exc``; ``None`` when ``exc`` is no answer of MLflow's client."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "MlflowException" not in names:
        return None
    if str(exc).startswith("API request to"):
        return not CLIENT_ERROR.search(str(exc))
    if "RestException" in names:
        return exc.get_http_status_code() >= 500
    return None


def _is_disk(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def infrastructure_failure(exc: BaseException, tracking_uri: str, where: str) -> str | None:
    """One line naming what failed when ``exc`` (or an exception it was raised from) is a failure of the tracking
    store at ``tracking_uri``, of the storage or disk (``where``: the path written, when the error names none), of
    Ray, or an :class:`~ndebench.platform.failures.outage.InfrastructureError`; ``None`` for anything else (the method's
    failure, or bad input)."""
    chain = exception_chain(exc)
    if is_disk_full(exc):
        return str(disk_full(exc, where))
    answers = {_store_failed(error) for error in chain}
    if True in answers:
        return f"the tracking store {tracking_uri} failed: {cause_line(chain[-1])}"
    if False in answers:
        return None
    disk = next((error for error in chain if _is_disk(error)), None)
    if disk is not None:
        return f"storage or disk failed at {getattr(disk, 'filename', None) or where}: {cause_line(disk)}"
    return outage(exc, tracking_uri)


def raised_in_trial(error_text: str) -> tuple[str, str | None] | None:
    """The failure line and MLflow run id of a :class:`TrialInfrastructureError` in Ray's text of a trial's error,
    or ``None`` when the trial failed otherwise."""
    found = RAISED.findall(error_text)
    if not found:
        return None
    line = found[-1].strip()
    run = RUN_SUFFIX.search(line)
    return (line[:run.start()], run.group(1)) if run else (line, None)


def infrastructure_retried(trainable: Callable[..., Any]) -> Callable[..., Any]:
    """``trainable`` (called as ``trainable(config, tracking_uri=..., storage_uri=..., ...)``) raising
    :class:`TrialInfrastructureError` for an infrastructure failure wherever it happens in the trial (starting its
    run, training, logging its final artifacts), so that Ray retries the trial from its checkpoint."""

    @functools.wraps(trainable)
    def run(config: dict[str, Any], **kwargs: Any) -> Any:
        try:
            return trainable(config, **kwargs)
        except TrialInfrastructureError:
            raise
        except Exception as exc:
            cause = infrastructure_failure(exc, kwargs["tracking_uri"], kwargs.get("storage_uri") or "the trial folder")
            if cause is None:
                raise
            raise TrialInfrastructureError(cause) from exc

    return run
