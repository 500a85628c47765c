"""A failure of what a sweep runs on rather than of its input: the tracking server or database, Ray, the storage.

Recognised in whatever wrapping it arrives (MLflow's REST client over requests and urllib3, SQLAlchemy, Ray) and
told in one line; the command line exits 3 for it (:mod:`ndebench.platform.failures.exitcodes`), never 2 (bad input).
"""
from __future__ import annotations

from ndebench.platform.failures.credentials import refused_status
from ndebench.platform.failures.diskfull import exception_chain

TRANSPORT_MODULES = ("requests", "urllib3")
DATABASE_ERRORS = {("sqlalchemy.exc", "OperationalError"), ("sqlite3", "OperationalError")}


class InfrastructureError(Exception):
    """Raised by ndebench when the tracking store, Ray or the storage cannot be reached or written; ``str`` is
    one line naming which, where, and the cause."""


def cause_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc``, at most 300 characters."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def _is_tracking(exc: BaseException) -> bool:
    names = {(cls.__module__, cls.__name__) for cls in type(exc).__mro__}
    # requests' own ValueErrors (InvalidURL, MissingSchema) are bad input, not an outage.
    transport = type(exc).__module__.split(".")[0] in TRANSPORT_MODULES and not isinstance(exc, ValueError)
    return (transport or bool(names & DATABASE_ERRORS)
            # MLflow's REST client: connection failures, timeouts, 5xx answers after its retries
            or (any(name == "MlflowException" for _, name in names) and str(exc).startswith("API request to")))


def _is_ray(exc: BaseException, name: str = "RaySystemError") -> bool:
    return any(cls.__module__ == "ray.exceptions" and cls.__name__ == name for cls in type(exc).__mro__)


def outage(exc: BaseException, tracking_uri: str) -> str | None:
    """One line naming what failed and why when ``exc``, or an exception it was raised from, is an outage of the
    tracking store at ``tracking_uri``, of Ray, or an :class:`InfrastructureError`; ``None`` otherwise."""
    chain = exception_chain(exc)
    if any(refused_status(error) for error in chain):
        return None  # refused credentials: platform.credentials, exit 2
    for error in chain:
        if isinstance(error, InfrastructureError):
            return str(error)
    root = cause_line(chain[-1])
    if any(_is_tracking(error) for error in chain):
        return f"the tracking store {tracking_uri} failed: {root}"
    killed = next((error for error in chain if _is_ray(error, "OutOfMemoryError")), None)
    if killed is not None:
        # Ray 2.60's Tune raises it out of fit() for a trial's worker, so it ends the sweep: say what to change.
        return (f"Ray's memory monitor killed a trial's worker: {cause_line(killed)}; a stack of trials "
                "(resources.stack, default 32) trains in one process and needs about as many times one trial's "
                "memory: lower resources.stack (e.g. --set resources.stack=8) and continue with `ndebench run ... "
                "--resume`")
    if any(_is_ray(error) for error in chain):
        return f"Ray failed: {root}"
    if any(isinstance(error, ConnectionError) for error in chain):
        return f"a connection failed: {root}"
    return None
