"""One driver per study: the study run carries its driver (``ndebench.driver``: host and pid) and a heartbeat
(``ndebench.heartbeat``: Unix seconds, refreshed every :data:`INTERVAL_S`; ``0`` once the driver ended).

A driver is live while its heartbeat is younger than :data:`STALE_S` and, on the same host, its pid exists
(so a driver killed with SIGKILL frees its study at once on its own machine, and after :data:`STALE_S`
elsewhere).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass

from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import client, retry, search

DRIVER = f"{TAG}driver"
HEARTBEAT = f"{TAG}heartbeat"
INTERVAL_S = 10.0
STALE_S = 60.0


@dataclass(frozen=True)
class Driver:
    """The driver recorded on a study run and the age of its last heartbeat."""

    host: str
    pid: int
    age_s: float

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} (last heartbeat {self.age_s:.0f} s ago)"


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recorded_driver(uri: str, study: str) -> tuple[Driver | None, bool]:
    """The driver recorded on the study run (``None`` without one, or after a clean end) and whether it is live."""
    runs = search(uri, study, f"tags.`{TAG}kind` = 'study'")
    tags = runs[0].data.tags if runs else {}
    try:
        host, pid = tags[DRIVER].rsplit(":", 1)
        beat = float(tags[HEARTBEAT])
    except (KeyError, ValueError):
        return None, False
    if not beat:
        return None, False
    driver = Driver(host, int(pid), max(0.0, time.time() - beat))
    same_host = host == socket.gethostname()
    live = driver.age_s < STALE_S and not (same_host and (driver.pid == os.getpid() or not _pid_exists(driver.pid)))
    return driver, live


class Heartbeat:
    """Refreshes this process's heartbeat on the study run ``run_id`` from a daemon thread until :meth:`stop`."""

    def __init__(self, uri: str, run_id: str, interval_s: float = INTERVAL_S):
        self.uri, self.run_id, self.interval_s = uri, run_id, interval_s
        self._stopped = threading.Event()
        self._beat({DRIVER: f"{socket.gethostname()}:{os.getpid()}"})
        self._thread = threading.Thread(target=self._run, name="ndebench-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, extra: dict[str, str] | None = None, value: float | None = None) -> None:
        from mlflow.entities import RunTag

        tags = {HEARTBEAT: f"{time.time() if value is None else value:.0f}"} | (extra or {})
        retry(lambda: client(self.uri).log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()]))

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - a missed beat only makes the study look free sooner
                continue

    def stop(self) -> None:
        """End the heartbeat; the study is free for another driver at once."""
        self._stopped.set()
        self._thread.join(timeout=self.interval_s)
        try:
            self._beat(value=0)
        except Exception:  # noqa: BLE001 - a store that is gone leaves a heartbeat that goes stale
            pass
