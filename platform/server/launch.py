"""MLflow processes started by ndebench: the tracking server a cluster needs and the local UI.

Both run as a child in its own process group, which is ended with the parent (SIGINT, SIGTERM, SIGHUP or a
normal exit; after a SIGKILL of the parent, by a small watchdog process), so no MLflow worker outlives the
``ndebench`` command that started it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ndebench.platform.server.auth import PASSWORD_CACHE_TTL_S

# With job execution on, MLflow 3.17 starts worker processes that survive the server's own exit.
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
# Seconds the server gets to shut down after SIGTERM before the group is killed: stopping must take under 2 s.
STOP_GRACE_S = 0.8
# Run as `python -c WATCHDOG PARENT GROUP`: waits until PARENT is gone (its children are then re-parented),
# then ends process group GROUP (SIGTERM, SIGKILL after 10 s); quits early once the group is gone.
WATCHDOG = """
import os, signal, sys, time
parent, group = int(sys.argv[1]), int(sys.argv[2])
def alive():
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False
while alive() and os.getppid() == parent:
    time.sleep(0.5)
for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
    if not alive():
        break
    os.killpg(group, sig)
    deadline = time.monotonic() + wait
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
"""


@dataclass(frozen=True)
class ServerSettings:
    """A tracking server: ``backend_store_uri`` (runs, params, metrics), ``artifacts_destination`` (a folder
    or object-store URI the server proxies artifact uploads to), bind ``host`` and ``port``, the name
    workers reach it by (``public_host``), the Host headers it accepts (``allowed_hosts``), and whether it runs
    MLflow's basic-auth app (``auth``), caching a checked password for ``auth_cache_ttl_s`` seconds."""

    backend_store_uri: str
    artifacts_destination: str
    host: str = "127.0.0.1"
    port: int = 5000
    public_host: str = ""
    allowed_hosts: tuple[str, ...] = ()
    workers: int = 4
    auth: bool = False
    auth_cache_ttl_s: int = PASSWORD_CACHE_TTL_S

    @property
    def reachable_host(self) -> str:
        if self.public_host:
            return self.public_host
        return socket.getfqdn() if self.host in ("0.0.0.0", "::") else self.host

    @property
    def tracking_uri(self) -> str:
        """The ``--tracking-uri`` that the driver and every worker node must use."""
        return f"http://{self.reachable_host}:{self.port}"

    @property
    def local_url(self) -> str:
        """The server's address as reached from this machine (a wildcard bind address on loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(self.host, self.host)
        return f"http://{host}:{self.port}"

    def announce(self) -> None:
        """The line ``ndebench server`` prints once ``/health`` answers."""
        print(f"listening on {self.host}:{self.port}; workers and the driver must use:  --tracking-uri "
              f"{self.tracking_uri}" + ("  (with a worker user from `ndebench grant`)" if self.auth else ""),
              flush=True)

    def host_headers(self) -> list[str]:
        """MLflow's default allowed hosts (localhost, private IPs) plus the name workers use: MLflow 3.17
        refuses requests that reach it by a host name it was not told about."""
        from mlflow.server.security_utils import get_default_allowed_hosts

        name = self.reachable_host
        extra = list(self.allowed_hosts) or [name, f"{name}:{self.port}"]
        return list(dict.fromkeys(get_default_allowed_hosts() + extra))


def default_settings(cwd: Path | None = None, **overrides: object) -> ServerSettings:
    """Defaults for the head node: ``sqlite:///<cwd>/mlflow.db`` and ``<cwd>/mlartifacts``, absolute."""
    base = Path(cwd or os.getcwd()).resolve()
    values: dict[str, object] = {
        "backend_store_uri": f"sqlite:///{base / 'mlflow.db'}",
        "artifacts_destination": str(base / "mlartifacts"),
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return ServerSettings(**values)  # type: ignore[arg-type]


def server_command(settings: ServerSettings) -> list[str]:
    """The ``mlflow server`` command line for ``settings`` (artifacts proxied through the server, so workers
    need no access to the artifact store themselves)."""
    return [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", settings.backend_store_uri,
        "--artifacts-destination", settings.artifacts_destination, "--serve-artifacts",
        "--host", settings.host, "--port", str(settings.port), "--workers", str(settings.workers),
        "--allowed-hosts", ",".join(settings.host_headers()),
    ] + (["--app-name", "basic-auth"] if settings.auth else [])


def server_environment(settings: ServerSettings, credentials_file: str | None = None,
                       cwd: Path | None = None) -> dict[str, str]:
    """Environment of the server process beyond this one's: with ``auth``, :func:`basic_auth_environment`."""
    return basic_auth_environment(credentials_file, cwd, settings.auth_cache_ttl_s) if settings.auth else {}


def basic_auth_environment(credentials_file: str | None = None, cwd: Path | None = None,
                           cache_ttl_s: int = PASSWORD_CACHE_TTL_S) -> dict[str, str]:
    """The basic-auth config of an MLflow server or UI: admin credentials from the environment or
    ``credentials_file``; users in ``<cwd>/mlflow-auth/basic_auth.db``; a checked password cached ``cache_ttl_s``
    seconds per server worker (:func:`~ndebench.platform.server.auth.auth_environment`)."""
    from ndebench.platform.server.auth import admin_credentials, auth_environment, check_installed

    check_installed()
    return auth_environment(Path(cwd or os.getcwd()) / "mlflow-auth", *admin_credentials(credentials_file),
                            cache_ttl_s=cache_ttl_s)


def ui_command(tracking_uri: str, host: str, port: int, auth: bool = False) -> list[str]:
    """The ``mlflow ui`` command line of ``ndebench ui`` (one worker: a local viewer; ``auth``: MLflow's
    basic-auth app, as ``server --auth``). Its allowed hosts are MLflow's defaults plus ``host``, given, so that
    MLflow does not print its advice to serve on 0.0.0.0 (the opposite of ``ui``'s ``--insecure`` rule); uvicorn
    prints warnings only, not a line per request."""
    from mlflow.server.security_utils import get_default_allowed_hosts

    allowed = ",".join(dict.fromkeys([*get_default_allowed_hosts(), host, f"{host}:{port}"]))
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri, "--host", host,
            "--port", str(port), "--workers", "1", "--allowed-hosts", allowed,
            "--uvicorn-opts", "--log-level warning"] + (
        ["--app-name", "basic-auth"] if auth else [])


def _when_ready(base_url: str, action: Callable[[], None], timeout_s: float = 120.0) -> None:
    def poll() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base_url}/health", timeout=2):
                    action()
                    return
            except OSError:
                time.sleep(0.25)

    threading.Thread(target=poll, daemon=True).start()


def serve(command: list[str], *, base_url: str | None = None, on_ready: Callable[[], None] | None = None,
          env: dict[str, str] | None = None) -> int:
    """Run ``command`` in its own process group until it exits or this process gets SIGINT, SIGTERM or SIGHUP;
    then end the whole group (the server and its workers) within :data:`STOP_GRACE_S` + 0.5 s. ``on_ready`` runs
    once ``base_url`` answers on ``/health``. ``env`` adds to this process's environment. Returns the child's exit
    code; stopped by a signal, this process exits ``128 + signal`` (as a shell reports it) at once, without the
    interpreter's teardown of MLflow's modules, which alone takes seconds on a loaded machine."""
    process = subprocess.Popen(command, env=dict(os.environ, **SERVER_ENV, **(env or {})), start_new_session=True)
    # A SIGKILL of this process runs none of its handlers: a watchdog ends the group once this process is gone.
    watchdog = subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(process.pid)],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    stopped_by = 0

    def stop(signum: int, _frame: object) -> None:
        # Only a flag: the handler runs inside the main thread's wait, where the child cannot be reaped.
        nonlocal stopped_by
        stopped_by = signum

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        if base_url and on_ready:
            _when_ready(base_url, on_ready)
        while not stopped_by and process.poll() is None:
            time.sleep(0.05)
    finally:
        _end_group(process)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        watchdog.kill()
        watchdog.wait()
    if stopped_by:
        _exit_now(128 + stopped_by)
    return process.returncode


def _exit_now(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _end_group(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the group, SIGKILL to whatever is left after ``grace_s``; returns once the group is gone (its
    leader reaped here, the workers it left by init) or 0.5 s after the SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            process.poll()
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            process.poll()
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
    process.poll()
