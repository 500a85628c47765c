"""A real two-node Ray cluster on this machine (`ray start` twice, a private temp dir), a real MLflow tracking
server (`ndebench server` on a loopback port) and `ndebench run --address`: trials run on both nodes and every
run lands in the server. Every process the test starts is stopped, and only those."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import yaml
from fakes import agent_ports, free_port, kill, processes_mentioning, wait_http
from ndebench.platform.record.tracking import TAG, search

pytestmark = [pytest.mark.system, pytest.mark.cluster]
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
# Two stacks of two seeds (stack 2), one per one-CPU node; one stack of all four would need only one node.
CONFIG = {
    "study": "two_nodes", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
    "model": {"hidden_size": 8}, "evaluate": {"seeds": [0, 1, 2, 3]}, "resources": {"stack": 2},
    "training": {"epochs": 3, "min_epochs": 3, "lr": 0.01}, "report": {"figures": "none"},
}


def test_sweep_spans_two_nodes_and_lands_in_the_tracking_server(tmp_path):
    # Short: Ray's unix socket paths live under the temp dir and must stay under 108 characters.
    temp_dir = tempfile.mkdtemp(prefix="ndb", dir="/tmp")
    ray_port, mlflow_port = free_port(), free_port()
    env = dict(os.environ, RAY_AUTH_MODE="token")
    server = subprocess.Popen(
        [sys.executable, "-m", "ndebench.platform", "server", "--host", "127.0.0.1", "--port", str(mlflow_port),
         "--public-host", "127.0.0.1", "--workers", "1"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        head = ["--head", "--port", str(ray_port), "--node-ip-address", "127.0.0.1", "--include-dashboard", "false"]
        for args in (head, ["--address", f"127.0.0.1:{ray_port}", "--node-ip-address", "127.0.0.1"]):
            subprocess.run([*RAY, "start", *args, *agent_ports(), "--num-cpus", "1", "--temp-dir", temp_dir,
                            "--object-store-memory", str(100 * 1024**2)], env=env, check=True, timeout=180,
                           capture_output=True)
        wait_http(f"http://127.0.0.1:{mlflow_port}/health", 120)
        uri = f"http://127.0.0.1:{mlflow_port}"
        (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(CONFIG))
        run = subprocess.run(
            [sys.executable, "-m", "ndebench.platform", "run", "sweep.yaml", "--address", f"127.0.0.1:{ray_port}",
             "--tracking-uri", uri, "--storage-path", str(tmp_path / "shared")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "cluster of 2 nodes" in run.stdout
        assert "View run" not in run.stdout + run.stderr  # MLflow's line per ended run, the workers' ones included
        trials = [r for r in search(uri, "two_nodes") if r.data.tags.get(f"{TAG}kind") == "trial"]
        assert sorted(r.data.tags[f"{TAG}seed"] for r in trials) == ["0", "1", "2", "3"]
        assert all(r.data.tags[f"{TAG}status"] == "ok" and r.info.status == "FINISHED" for r in trials)
        assert len({r.data.tags[f"{TAG}node"] for r in trials}) == 2
        assert {r.data.tags[f"{TAG}host"] for r in trials} == {socket.gethostname()}
        refused = subprocess.run(
            [sys.executable, "-m", "ndebench.platform", "run", "sweep.yaml", "--address", f"127.0.0.1:{ray_port}",
             "--tracking-uri", f"sqlite:///{tmp_path / 'local.db'}"], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=300)
        assert refused.returncode == 2 and "--tracking-uri" in refused.stderr
        assert not (tmp_path / "local.db").exists()
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        kill(processes_mentioning(temp_dir))
        deadline = time.monotonic() + 30
        while processes_mentioning(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = processes_mentioning(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not left
