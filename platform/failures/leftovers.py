"""What a killed process leaves on its machine: its temporary folders, and their removal.

Two kinds of temporary folder outlive a killed process. A trial stages each checkpoint (``trial_state.pt`` and its
run id) in a folder that Ray Tune copies into the storage inside ``tune.report``; a function trainable then waits
in ``tune.report`` until the driver asks for the next result, so a worker killed there (a stopped or killed sweep,
a lost node, a retried trial) never removes it. A driver captures Ray's output in a folder that it removes on exit,
which a SIGKILL skips. Each folder's name carries its kind, host and process id
(``ndebench-KIND-HOST-PID-*``): every driver as it starts and ends, and every new trial, removes the folders of
this host whose process is gone. A folder of a live process, of another host (a shared temporary directory) or of
another user stays.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
from pathlib import Path

CHECKPOINT = "checkpoint"
DRIVER_LOG = "driver-log"
KINDS = (CHECKPOINT, DRIVER_LOG)


def _host_prefix(kind: str) -> str:
    return f"ndebench-{kind}-{socket.gethostname()}-"


def process_folder(kind: str) -> tempfile.TemporaryDirectory:
    """A temporary folder of ``kind`` (one of :data:`KINDS`) named after this host and process, so that it can be
    removed once the process is gone (:func:`remove_orphaned`); use it as a context manager or ``cleanup()`` it."""
    if kind not in KINDS:
        raise ValueError(f"unknown temporary folder kind {kind!r}; valid: {', '.join(KINDS)}")
    return tempfile.TemporaryDirectory(prefix=f"{_host_prefix(kind)}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_orphaned(folder: str | Path | None = None) -> list[Path]:
    """Remove this host's :func:`process_folder` folders in ``folder`` (default: the temporary directory) whose
    process no longer runs; returns the folders removed. A process id reused since keeps its folder until that
    process ends too."""
    removed = []
    for kind in KINDS:
        mine = _host_prefix(kind)
        for path in Path(folder or tempfile.gettempdir()).glob(f"{glob.escape(mine)}*"):
            pid, _, suffix = path.name[len(mine):].partition("-")
            # tempfile's random suffix has no "-": a longer host name that starts with ours does not parse
            if not pid.isdigit() or not suffix or "-" in suffix or _alive(int(pid)):
                continue
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
    return removed
