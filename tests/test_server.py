"""The MLflow processes ndebench starts: the cluster tracking server and the UI."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from fakes import free_port, read_until, start_server, wait_healthy
from ndebench.platform.cli.main import main
from ndebench.platform.server.launch import default_settings, server_command


def test_ui_for_an_unknown_study_names_the_known_ones(uri, capsys):
    from mlflow.tracking import MlflowClient

    MlflowClient(uri).create_experiment("known_study")
    assert main(["ui", "--tracking-uri", uri, "--study", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "known_study" in err


def test_server_command_allows_the_public_name(tmp_path):
    settings = default_settings(tmp_path, port=5123, public_host="head.cluster")
    command = server_command(settings)
    assert settings.tracking_uri == "http://head.cluster:5123"
    hosts = command[command.index("--allowed-hosts") + 1].split(",")
    assert {"head.cluster", "head.cluster:5123", "localhost", "127.0.0.1"} <= set(hosts)
    assert command[command.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


def _children(pid: int) -> set[int]:
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.add(int(stat.parent.name))
    return children


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.system
def test_server_serves_and_stops_with_its_parent(tmp_path):
    """`ndebench server` answers on loopback by the public name it printed and takes its workers down on SIGTERM."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ndebench.platform", "server", "--host", "127.0.0.1", "--port", str(port),
         "--public-host", "localhost", "--workers", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/health", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert process.poll() is None, process.stdout.read()
                assert time.monotonic() < deadline, "server did not answer within 90 s"
                time.sleep(0.5)
        announced = read_until(process, "listening on")
        assert "starting on 127.0.0.1:" in announced and f"--tracking-uri http://localhost:{port}" in announced
        from mlflow.tracking import MlflowClient

        mlflow_client = MlflowClient(f"http://localhost:{port}")
        experiment = mlflow_client.create_experiment("served")
        assert mlflow_client.get_experiment(experiment).artifact_location.startswith("mlflow-artifacts:")
        assert (tmp_path / "mlflow.db").exists()
        server_groups = _children(process.pid)
        assert server_groups
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 128 + signal.SIGTERM
    assert not any(_group_alive(pgid) for pgid in server_groups)


@pytest.mark.system
def test_server_killed_with_sigkill_takes_mlflow_down_and_binds_loopback_by_default(tmp_path):
    """A SIGKILL runs no handler of `ndebench server`: its watchdog still ends the MLflow server's group."""
    port, process = start_server(tmp_path)
    try:
        wait_healthy(port, process, seconds=90)
        groups = {pid for pid in _children(process.pid) if os.getpgid(pid) == pid}
        assert groups
        assert "listening on 127.0.0.1:" in read_until(process, "listening on")
    finally:
        process.kill()
        process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_group_alive(pgid) for pgid in groups):
        assert time.monotonic() < deadline, "the MLflow server outlived `ndebench server` by 30 s"
        time.sleep(0.5)
