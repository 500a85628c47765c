"""The way teams run ndebench: `ray job submit` to a two-node Ray cluster (head started with the dashboard, a
private temp dir) with only `RAY_ADDRESS` (set by Ray for the job) and `MLFLOW_TRACKING_URI` (plus MLflow's
standard credentials) in the job's environment, writing to an `ndebench server --auth` that refuses anyone
without them. While the cluster is still head-only, the same sweep with a sqlite URI exits 2 before any trial.
Every process the test starts is stopped, and only those."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest
import yaml
from fakes import agent_ports, free_port, kill, processes_mentioning, wait_http
from ndebench.platform.record.tracking import TAG, search

pytestmark = [pytest.mark.system, pytest.mark.cluster]
pytest.importorskip("ray.dashboard.modules.job.sdk", reason="needs ray[default] (the `cluster` extra)")
pytest.importorskip("flask_wtf", reason="needs mlflow[auth] (the `cluster` extra)")
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
CONFIG = {
    "study": "ray_job", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
    "model": {"hidden_size": 8}, "evaluate": {"seeds": [0, 1]},
    "training": {"epochs": 2, "min_epochs": 2, "lr": 0.01}, "report": {"figures": "none"},
}
USER, PASSWORD = "team-admin", "a-long-test-password"


def _ours(temp_dir: str, ray_port: int) -> list[int]:
    """This cluster's processes: those under its temp dir, and Ray's client server, whose command line names
    only the head's port."""
    return sorted(set(processes_mentioning(temp_dir)) | set(processes_mentioning(f":{ray_port}\0")))


def _submit(dashboard: str, folder, env_vars: dict[str, str], storage: str, env: dict[str, str]):
    """``ray job submit`` of the sweep; a head whose job agent is not up yet answers "No available agent ...,
    please try again later" (slow on a loaded machine), so that answer is retried for up to two minutes."""
    runtime_env = json.dumps({"env_vars": env_vars})
    entrypoint = (f"{sys.executable} -m ndebench.platform run sweep.yaml --storage-path {storage}; "
                  "echo ndebench-exit=$?")
    deadline = time.monotonic() + 120
    while True:
        done = subprocess.run([*RAY, "job", "submit", "--address", dashboard, "--working-dir", str(folder),
                               "--runtime-env-json", runtime_env, "--", "sh", "-c", entrypoint],
                              env=env, capture_output=True, text=True, timeout=600)
        if "No available agent to submit job" not in done.stderr or time.monotonic() > deadline:
            return done
        time.sleep(2)


def test_ray_job_lands_in_an_authenticated_server_and_sqlite_is_refused_on_a_head_only_cluster(tmp_path,
                                                                                               monkeypatch):
    temp_dir = tempfile.mkdtemp(prefix="ndbj", dir="/tmp")
    ray_port, dashboard_port, mlflow_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env["RAY_AUTH_MODE"] = "token"
    server_dir, job_dir = tmp_path / "server", tmp_path / "job"
    server_dir.mkdir()
    job_dir.mkdir()
    (job_dir / "sweep.yaml").write_text(yaml.safe_dump(CONFIG))
    server = subprocess.Popen(
        [sys.executable, "-m", "ndebench.platform", "server", "--auth", "--port", str(mlflow_port),
         "--public-host", "127.0.0.1", "--workers", "1"],
        cwd=server_dir, env=dict(env, MLFLOW_TRACKING_USERNAME=USER, MLFLOW_TRACKING_PASSWORD=PASSWORD),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    common = ["--num-cpus", "1", "--object-store-memory", str(100 * 1024**2)]
    try:
        subprocess.run([*RAY, "start", "--head", "--port", str(ray_port), "--node-ip-address", "127.0.0.1",
                        *agent_ports(), "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                        "--dashboard-port", str(dashboard_port), "--temp-dir", temp_dir, *common],
                       env=env, check=True, timeout=180, capture_output=True)
        dashboard = f"http://127.0.0.1:{dashboard_port}"
        uri = f"http://127.0.0.1:{mlflow_port}"
        wait_http(f"{uri}/health", 120)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{uri}/api/2.0/mlflow/experiments/search?max_results=1", timeout=10)
        assert refused.value.code == 401

        local_db = tmp_path / "local.db"
        head_only = _submit(dashboard, job_dir, {"MLFLOW_TRACKING_URI": f"sqlite:///{local_db}"},
                            str(tmp_path / "shared"), env)
        assert "ndebench-exit=2" in head_only.stdout, head_only.stdout + head_only.stderr
        assert "sqlite" in head_only.stdout and "--single-node" in head_only.stdout
        assert not local_db.exists()

        # The second node keeps its own temp dir, as a machine of its own would: in a shared one, its runtime-env
        # agent unpacks the job's working_dir again over the folder the head's driver runs in.
        subprocess.run([*RAY, "start", "--address", f"127.0.0.1:{ray_port}", "--node-ip-address", "127.0.0.1",
                        *agent_ports(), "--temp-dir", f"{temp_dir}/node2",
                        *common], env=env, check=True, timeout=180, capture_output=True)
        job = _submit(dashboard, job_dir, {"MLFLOW_TRACKING_URI": uri, "MLFLOW_TRACKING_USERNAME": USER,
                                           "MLFLOW_TRACKING_PASSWORD": PASSWORD}, str(tmp_path / "shared"), env)
        assert "ndebench-exit=0" in job.stdout, job.stdout + job.stderr
        # The password in the job's env_vars (which Ray's runtime-env agent logs) reaches no file of the storage.
        shared = [p for p in (tmp_path / "shared").rglob("*") if p.is_file()]
        assert [p for p in shared if PASSWORD.encode() in p.read_bytes()] == []
        assert [stat.S_IMODE(p.stat().st_mode) for p in shared if p.name.startswith("ray-")] == [0o600]
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
        trials = [r for r in search(uri, "ray_job") if r.data.tags.get(f"{TAG}kind") == "trial"]
        assert sorted(r.data.tags[f"{TAG}seed"] for r in trials) == ["0", "1"]
        assert all(r.data.tags[f"{TAG}status"] == "ok" for r in trials)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        kill(_ours(temp_dir, ray_port))
        deadline = time.monotonic() + 30
        while _ours(temp_dir, ray_port) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _ours(temp_dir, ray_port)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not left
