"""Temporary folders of killed processes (checkpoint staging, driver logs): named after kind, host and process,
removed once the process is gone."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ndebench.platform.failures.leftovers import CHECKPOINT, DRIVER_LOG, KINDS, process_folder, remove_orphaned

HOST = socket.gethostname()
STAGE_AND_WAIT = (
    "import sys, time\n"
    "from ndebench.platform.failures.leftovers import process_folder\n"
    "folder = process_folder(sys.argv[1])\n"
    "print(folder.name, flush=True)\n"
    "time.sleep(600)\n"
)


def _staging_process(tmp_path: Path, kind: str) -> tuple[subprocess.Popen, Path]:
    process = subprocess.Popen([sys.executable, "-c", STAGE_AND_WAIT, kind], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp_path)})
    return process, Path(process.stdout.readline().strip())


@pytest.mark.parametrize("kind", KINDS)
def test_a_folder_is_named_after_its_kind_host_and_process_and_removed_on_exit(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with process_folder(kind) as folder:
        assert Path(folder).parent == tmp_path
        assert Path(folder).name.startswith(f"ndebench-{kind}-{HOST}-{os.getpid()}-")
        assert remove_orphaned(tmp_path) == [] and Path(folder).is_dir()  # this process is alive
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_kind_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="unknown temporary folder kind 'staging'; valid: checkpoint, driver-log"):
        process_folder("staging")


def test_only_the_folders_of_this_hosts_dead_processes_are_removed(tmp_path):
    killed, orphans = [_staging_process(tmp_path, kind) for kind in KINDS], []
    alive, kept = _staging_process(tmp_path, CHECKPOINT)
    try:
        for process, folder in killed:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            orphans.append(folder)
        pid = killed[0][0].pid
        others = [tmp_path / f"ndebench-{CHECKPOINT}-other-host-{pid}-abc123_x",  # another host on a shared /tmp
                  tmp_path / f"ndebench-{DRIVER_LOG}-{HOST}-{pid}-7-abc123_x",  # host "{HOST}-{pid}", pid 7
                  tmp_path / f"ndebench-{CHECKPOINT}-{HOST}-notapid-abc123_x",
                  tmp_path / f"ndebench-{HOST}-{pid}-abc123_x",
                  tmp_path / f"unrelated-{pid}"]
        for other in others:
            other.mkdir()
        assert all(folder.is_dir() for folder in [*orphans, kept])
        assert remove_orphaned(tmp_path) == orphans
        assert not any(folder.exists() for folder in orphans)
        assert kept.is_dir() and all(other.is_dir() for other in others)
        assert remove_orphaned(tmp_path) == []
    finally:
        alive.kill()
        alive.wait()
    assert remove_orphaned(tmp_path) == [kept]
