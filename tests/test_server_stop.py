"""`ndebench server` and `ndebench ui` stop within 2 s of SIGTERM or SIGINT and leave no process; `server` says
"listening" only once `/health` answers; `ndebench run` waits, announced and bounded, for a server that is still
starting."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fakes import free_port, read_until
from ndebench.platform.engine.runchecks import check_tracking_reachable
from ndebench.platform.failures.outage import InfrastructureError

STOP_LIMIT_S = 2.0


def _descendants(pid: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _living(pids: set[int]) -> set[int]:
    """Those of ``pids`` that exist and are not zombies waiting for init."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _start(command: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ndebench.platform", *command], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.system
@pytest.mark.parametrize(("command", "sig"), [("server", signal.SIGTERM), ("ui", signal.SIGINT)])
def test_server_and_ui_stop_within_2_s_leaving_no_process(tmp_path, command, sig):
    port = free_port()
    extra = ["--workers", "2"] if command == "server" else ["--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]
    process = _start([command, "--port", str(port), *extra], tmp_path)
    try:
        if command == "server":
            announced = read_until(process, "listening on")
            # The line comes only once /health answers.
            assert "listening on 127.0.0.1:" in announced and _health(port), announced
        deadline = time.monotonic() + 120
        while not _health(port):
            assert process.poll() is None and time.monotonic() < deadline, "no /health answer in 120 s"
            time.sleep(0.5)
        tree = _descendants(process.pid)
        assert len(tree) >= 2  # the MLflow server and the watchdog, at least
        started = time.monotonic()
        process.send_signal(sig)
        code = process.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 128 + sig
    assert took < STOP_LIMIT_S, f"`ndebench {command}` took {took:.1f} s to exit after {sig.name}"
    assert _living(tree) == set(), f"left running: {sorted(_living(tree))}"
    assert not _health(port)


def test_run_waits_for_a_server_that_starts_late(capsys):
    """A port that starts accepting 1.5 s after the check began passes it, after one announced line."""
    port = free_port()
    listening = threading.Event()

    def listen_later(server: list[socket.socket]) -> None:
        time.sleep(1.5)
        server.append(socket.create_server(("127.0.0.1", port)))
        listening.set()

    server: list[socket.socket] = []
    thread = threading.Thread(target=listen_later, args=(server,))
    thread.start()
    started = time.monotonic()
    try:
        check_tracking_reachable(f"http://127.0.0.1:{port}", wait_s=30)
    finally:
        thread.join()
        server[0].close()
    assert 1.5 <= time.monotonic() - started < 30
    out = capsys.readouterr().out
    assert out == f"[ndebench] no tracking server answers at 127.0.0.1:{port} yet: waiting up to 30 s for it to start\n"


def test_the_wait_is_bounded(capsys):
    port = free_port()
    started = time.monotonic()
    with pytest.raises(InfrastructureError, match=f"no tracking server answers at 127.0.0.1:{port} "
                                                  r"\(ConnectionRefusedError"):
        check_tracking_reachable(f"http://127.0.0.1:{port}", wait_s=1)
    assert 1 <= time.monotonic() - started < 5
    assert capsys.readouterr().out.count("waiting up to 1 s") == 1


@pytest.mark.system
def test_run_started_before_the_server_waits_and_then_records(tmp_path, capsys):
    """The driver's check, started 3 s before `ndebench server`, waits for it; MLflow calls then succeed."""
    from mlflow.tracking import MlflowClient

    port = free_port()
    processes: list[subprocess.Popen] = []
    timer = threading.Timer(3.0, lambda: processes.append(
        _start(["server", "--port", str(port), "--workers", "1"], tmp_path)))
    timer.start()
    try:
        check_tracking_reachable(f"http://127.0.0.1:{port}", wait_s=120)
        assert "waiting up to 120 s" in capsys.readouterr().out
        experiment = MlflowClient(f"http://127.0.0.1:{port}").create_experiment("late")
        assert MlflowClient(f"http://127.0.0.1:{port}").get_experiment(experiment).name == "late"
    finally:
        timer.join()
        processes[0].send_signal(signal.SIGTERM)
        processes[0].wait(timeout=30)
