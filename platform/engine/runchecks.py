"""What ``ndebench run`` can know before Ray starts: a usable and reachable tracking URI, writable output and
storage folders, trial resources the cluster can grant, and a plan of a sane size. Each check raises
``ValueError`` naming the flag or key, the bad value and what is expected (exit 2), or
:class:`~ndebench.platform.failures.outage.InfrastructureError` for a tracking store or storage that cannot be reached
or
written (exit 3), or returns warnings; and, once the sweep ended, :func:`run_exit`, the exit status it earned."""
from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ndebench.platform.cluster.storage import Storage
from ndebench.platform.failures import exitcodes
from ndebench.platform.failures.outage import InfrastructureError, cause_line
from ndebench.platform.record.completeness import not_ok_summary, planned_statuses
from ndebench.platform.record.store import sqlite_path
from ndebench.platform.spec.config import SweepSpec
from ndebench.platform.spec.plan import sweep_cells

SERVER_SCHEMES = ("http", "https")
LARGE_PLAN = 100_000
PROBE_TIMEOUT_S = 5.0
# How long `ndebench run` waits for a tracking server that is starting (refusing connections) before exit 3.
SERVER_WAIT_S = 60.0


def check_tracking_uri(uri: str) -> None:
    """A server URI, or a database URI whose SQLAlchemy driver the installed MLflow can load."""
    from mlflow.store.db.db_types import DATABASE_ENGINES

    scheme = uri.split("://", 1)[0].lower()
    if scheme in SERVER_SCHEMES:
        return
    engine = scheme.split("+", 1)[0]
    if engine not in DATABASE_ENGINES:
        raise ValueError(f"--tracking-uri {uri!r}: scheme {scheme!r} is not one MLflow stores runs in; use "
                         f"{', '.join(SERVER_SCHEMES)} (a tracking server) or a database: "
                         f"{', '.join(DATABASE_ENGINES)}")
    from sqlalchemy.engine import make_url

    try:
        make_url(uri).get_dialect().import_dbapi()
    except ImportError as exc:
        raise ValueError(f"--tracking-uri {uri!r}: the {engine} driver is not installed ({exc}); install it into "
                         "this environment or use sqlite:///PATH or http://HOST:PORT") from None
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy raises its own types for a malformed URL
        raise ValueError(f"--tracking-uri {uri!r} is not a database URL SQLAlchemy reads: {exc}") from None


def check_tracking_reachable(uri: str, timeout_s: float = PROBE_TIMEOUT_S, wait_s: float | None = None) -> None:
    """A tracking server accepts a connection within ``timeout_s`` seconds; one that refuses connections (still
    starting: MLflow binds its port once its workers are up) is waited for up to ``wait_s`` (default
    :data:`SERVER_WAIT_S`) seconds, announced in one line. A sqlite database's folder exists and takes files
    (MLflow creates the database, not its folder). Other databases are left to MLflow."""
    database = sqlite_path(uri)
    if database is not None:
        folder = database.parent
        if not folder.is_dir():
            raise InfrastructureError(f"--tracking-uri {uri}: the database's folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK) or (database.exists() and not os.access(database, os.W_OK)):
            raise InfrastructureError(f"--tracking-uri {uri}: the database {database} cannot be written "
                                      "(no write permission)")
        return
    parts = urlsplit(uri)
    if parts.scheme.lower() not in SERVER_SCHEMES:
        return
    address = (parts.hostname or "", parts.port or (443 if parts.scheme.lower() == "https" else 80))
    wait_s = SERVER_WAIT_S if wait_s is None else wait_s
    deadline = None
    while True:
        try:
            socket.create_connection(address, timeout=timeout_s).close()
            return
        except ConnectionRefusedError as exc:
            if deadline is None:
                deadline = time.monotonic() + wait_s
                print(f"[ndebench] no tracking server answers at {address[0]}:{address[1]} yet: waiting up to "
                      f"{wait_s:g} s for it to start", flush=True)
            if time.monotonic() >= deadline:
                raise InfrastructureError(f"--tracking-uri {uri}: no tracking server answers at {address[0]}:"
                                          f"{address[1]} ({cause_line(exc)})") from None
            time.sleep(0.5)
        except OSError as exc:
            raise InfrastructureError(f"--tracking-uri {uri}: no tracking server answers at {address[0]}:{address[1]} "
                                      f"({cause_line(exc)})") from None


def check_out_dir(out: str | Path) -> None:
    """``--out`` is a folder this process can write, or can be created in one (nothing is created here)."""
    path = Path(out).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        what = "is a file" if existing == path else f"lies under the file {str(existing)!r}"
        raise ValueError(f"--out {str(out)!r} {what}; it must be a folder (created if missing)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {str(out)!r} is not a writable folder: {str(existing)!r} refuses writes")


def check_storage_writable(storage: Storage) -> None:
    """The storage root takes a file (written and removed again through its pyarrow filesystem)."""
    probe = storage.path(f".ndebench-probe-{uuid.uuid4().hex}")
    try:
        storage.fs.create_dir(storage.root, recursive=True)
        with storage.fs.open_output_stream(probe) as stream:
            stream.write(b"")
        storage.fs.delete_file(probe)
    except OSError as exc:
        raise InfrastructureError(f"--storage-path {storage.display()!r} is not writable: {exc}") from None


def local_cpus() -> int:
    """The CPUs a local Ray would have: those this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def local_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def check_resources(spec: SweepSpec, nodes: list[dict[str, float]]) -> None:
    """``resources.cpu``/``gpu`` per trial fit on at least one node of ``nodes`` (each node's resources); a
    trial no node can hold would stay pending forever. A GPU request on a cluster without GPUs is left to the
    sweep, which runs such trials on CPUs and says so."""
    res = spec.resources
    most_cpu = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
    if res.cpu > most_cpu:
        raise ValueError(f"resources.cpu={res.cpu:g} is more than any node of the cluster has (largest: "
                         f"{most_cpu:g} CPUs); trials would wait forever. Use resources.cpu <= {most_cpu:g}")
    most_gpu = max((n.get("GPU", 0.0) for n in nodes), default=0.0)
    if most_gpu and res.gpu > most_gpu:
        raise ValueError(f"resources.gpu={res.gpu:g} is more than any node of the cluster has (largest: "
                         f"{most_gpu:g} GPUs); trials would wait forever. Use resources.gpu <= {most_gpu:g}")


def resource_warnings(spec: SweepSpec) -> list[str]:
    """For ``validate``, which knows no cluster: a request this machine could not grant to a local run."""
    cpus = local_cpus()
    if spec.resources.cpu > cpus:
        return [f"resources.cpu={spec.resources.cpu:g} is more than this machine's {cpus} CPUs: a local "
                "`ndebench run` refuses it; a cluster (--address) needs a node with that many"]
    return []


def size_warnings(total_trials: int) -> list[str]:
    """A plan so large that it is most likely a mistake (a grid over too many values, too many seeds)."""
    if total_trials > LARGE_PLAN:
        return [f"the plan has {total_trials:,} trials (more than {LARGE_PLAN:,}); check the grids, num_samples "
                "and seeds"]
    return []


@dataclass(frozen=True)
class RunExit:
    """How a sweep ended for ``ndebench run``: its exit ``code`` (:mod:`~ndebench.platform.failures.exitcodes`),
    the ``problems`` behind a code other than ``OK`` and the number of ``planned`` evaluate runs (0 when the
    machine failed first)."""

    code: int
    problems: tuple[str, ...]
    planned: int = 0


def run_exit(spec: SweepSpec, uri: str, failed: dict[str, str], infrastructure: list[str]) -> RunExit:
    """``INFRASTRUCTURE`` when the machine failed (``infrastructure``: a full disk during the sweep or its report),
    else ``FAILED`` when a cell ``failed`` or a planned (cell, seed) has no ok or diverged run, else ``OK``."""
    if infrastructure:
        return RunExit(exitcodes.INFRASTRUCTURE, tuple(infrastructure))
    statuses = planned_statuses(uri, spec.study, [c.key for c in sweep_cells(spec)], list(spec.evaluate.seeds))
    problems = [f"{len(failed)} failed cell(s)"] if failed else []
    problems += [summary] if (summary := not_ok_summary(statuses)) else []
    return RunExit(exitcodes.FAILED if problems else exitcodes.OK, tuple(problems), len(statuses))
