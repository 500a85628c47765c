"""The tracking store: where it is (the URI, made absolute), the MLflow client on it (the first one per sqlite
database made under a lock, the driver's writes fenced by its lease), sqlite's locked-database retry and the
study's experiment. :mod:`~ndebench.platform.record.tracking` writes and reads the study's runs through it."""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ndebench.platform.record.lease.fence import fenced

T = TypeVar("T")
_READY: set[str] = set()


def default_tracking_uri(cwd: str | Path | None = None) -> str:
    """``$MLFLOW_TRACKING_URI`` (as MLflow itself reads it), else ``sqlite:///<abs cwd>/mlflow.db``: absolute, so
    Ray trials (which chdir) write to the same database."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return absolute_uri(os.environ["MLFLOW_TRACKING_URI"])
    return f"sqlite:///{Path(cwd or os.getcwd()).resolve() / 'mlflow.db'}"


def absolute_uri(uri: str) -> str:
    """Make a relative ``sqlite:///rel.db`` absolute against the current directory; other URIs pass through."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        return prefix + str((Path.cwd() / uri[len(prefix):]).resolve())
    if uri.startswith(("file:", "./", "mlruns")) or "://" not in uri:
        raise ValueError(
            f"tracking URI {uri!r} is a file store; MLflow 3 needs a database or server, "
            "e.g. sqlite:///mlflow.db or http://host:5000"
        )
    return uri


def tracking_uri(uri: str | None = None) -> str:
    """The MLflow tracking URI the API and the commands use: ``uri`` made absolute (``sqlite:///rel.db`` against
    the current directory), or by default :func:`default_tracking_uri`."""
    return absolute_uri(uri) if uri else default_tracking_uri()


def artifact_root(uri: str) -> str | None:
    """Artifacts beside a sqlite database (``<db dir>/mlartifacts``), of another database (``postgresql://``) in
    ``<cwd>/mlartifacts`` (not MLflow's ``./mlruns``); a server decides itself."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
    if uri.split("://", 1)[0].lower() not in ("http", "https"):
        return (Path.cwd() / "mlartifacts").resolve().as_uri()
    return None


def retry(call: Callable[[], T], attempts: int = 8) -> T:
    """``call()``, retried with backoff while sqlite reports its database locked."""
    # Several trial processes share one sqlite file; a writer can briefly hold the lock.
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - MLflow wraps sqlite errors in its own exception types
            if "locked" not in str(exc).lower() or attempt == attempts - 1:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else ``None``."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def client(uri: str):
    """:func:`raw_client`, its writes fenced by the driver's lease
    (:func:`~ndebench.platform.record.lease.fence.fenced`)."""
    return fenced(raw_client(uri))


def raw_client(uri: str):
    """An ``MlflowClient``; the first one per process and sqlite database creates the schema under a lock. Against
    a tracking server MLflow would print two "View run" lines for every run a client ends, hundreds on a sweep's
    console (its workers' output included): off unless ``$MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` is set."""
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    if sqlite_path(uri) is None or uri in _READY:
        return MlflowClient(tracking_uri=uri)
    # Two sweeps started together on a fresh file would both run MLflow's schema migrations (in the
    # client's constructor) and one would die: each process's first client is made under the lock.
    with database_lock(uri):
        mlflow_client = MlflowClient(tracking_uri=uri)
    _READY.add(uri)
    return mlflow_client


@contextlib.contextmanager
def database_lock(uri: str) -> Iterator[None]:
    """An exclusive ``flock`` on the folder of a sqlite database (no lock file to leave behind); a no-op
    for a tracking server, which serialises its own writes."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)


def ensure_experiment(uri: str, study: str) -> str:
    """Create (on the driver, before any trial) the database and the study's experiment; return its id."""
    from mlflow.exceptions import MlflowException

    mlflow_client = client(uri)
    experiment = mlflow_client.get_experiment_by_name(study)
    if experiment is not None:
        return experiment.experiment_id
    root = artifact_root(uri)
    location = f"{root}/{study}" if root else None
    with database_lock(uri):
        experiment = mlflow_client.get_experiment_by_name(study)
        if experiment is not None:
            return experiment.experiment_id
        try:
            # The kind tag makes MLflow 3's UI open the model-training view rather than its GenAI overview.
            return mlflow_client.create_experiment(study, artifact_location=location,
                                                   tags={"mlflow.experimentKind": "custom_model_development"})
        except MlflowException:
            # Another driver on the same tracking server created it in between.
            experiment = mlflow_client.get_experiment_by_name(study)
            if experiment is None:
                raise
            return experiment.experiment_id
