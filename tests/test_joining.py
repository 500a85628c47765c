"""Joining a Ray cluster the usual ways: $RAY_ADDRESS, $MLFLOW_TRACKING_URI, GPU requests never dropped."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ndebench.platform.cluster.joining import gpu_request, init_arguments, ray_address
from ndebench.platform.record.store import default_tracking_uri

ROOT = Path(__file__).resolve().parents[1]


def test_address_flag_wins_then_ray_address(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ray_address("auto") == "auto"
    assert ray_address(None) == "10.0.0.1:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_address(None) is None


def test_local_ray_never_joins_a_running_cluster_and_joining_passes_no_local_options():
    local = init_arguments(None, verbose=False)
    assert local["address"] == "local" and "object_store_memory" in local
    # Ray refuses object_store_memory (and the dashboard switch) when it connects to an existing cluster.
    assert init_arguments("127.0.0.1:6379", verbose=True) == {"address": "127.0.0.1:6379", "log_to_driver": True}


@pytest.mark.system
def test_a_local_ray_starts_no_idle_worker_that_no_trial_could_use():
    """Ray prestarts an idle worker per CPU for the first driver, for tasks and actors without a runtime
    environment; Ray Tune's trial actors have one, so the driver's local Ray starts none (Ray's first-driver
    registration waits for its prestarted workers, so they would be there once ``ray.init`` returns)."""
    import psutil
    import ray

    ray.init(**init_arguments(None, verbose=False), num_cpus=1)
    try:
        started = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):  # a helper that ended since the listing
                started.append(child.cmdline()[:1])
        assert ["ray::IDLE"] not in started, started
        assert any("raylet" in " ".join(cmd) for cmd in started), started  # the children are this Ray's
    finally:
        ray.shutdown()


def test_tracking_uri_defaults_to_mlflow_tracking_uri(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://head:5000")
    assert default_tracking_uri(tmp_path) == "http://head:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert default_tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


def test_gpu_request_kept_on_a_joined_cluster_and_refused_locally():
    assert gpu_request(1.0, 2.0, joined=False) == (1.0, None)
    assert gpu_request(0.0, 0.0, joined=False) == (0.0, None)
    kept, message = gpu_request(0.5, 0.0, joined=True)
    assert kept == 0.5 and "wait" in message
    with pytest.raises(ValueError, match="--set resources.gpu=0"):
        gpu_request(1.0, 0.0, joined=False)


def test_run_refuses_a_gpu_request_on_a_local_ray_without_gpus(tmp_path, monkeypatch, capsys):
    import torch
    import yaml
    from ndebench.platform.cli.main import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "study": "gpu", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "evaluate": {"seeds": [0]}, "training": {"epochs": 1}}))
    assert main(["run", "sweep.yaml", "--set", "resources.gpu=1"]) == 2
    assert "--set resources.gpu=0" in capsys.readouterr().err
    assert not (tmp_path / "ray_results" / "gpu").exists()


@pytest.mark.parametrize("address,needle", [
    ("http://127.0.0.1:8265", "is the Ray dashboard's job-submission address, which `ray job submit` uses; a sweep "
                              "joins the cluster's GCS instead: set 127.0.0.1:6379 (or `auto` on a cluster node)"),
    ("https://head.example:8265", "set head.example:6379"),
    ("ray://head:10001", "is a Ray Client address, which does not suit Ray Tune (the driver must run on the "
                         "cluster): set the GCS address head:6379 on a cluster node (or `auto`)"),
])
@pytest.mark.parametrize("how", ["env", "flag"])
def test_job_submission_and_client_addresses_exit_2_in_one_line_before_ray(tmp_path, address, needle, how):
    """A fresh interpreter, so that the test also shows Ray was never imported (let alone started)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | ({"RAY_ADDRESS": address} if how == "env"
                                                                         else {})
    flag = ["--address", address] if how == "flag" else []
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ndebench.platform", "run",
                           str(ROOT / "tune_configs" / "quickstart.yaml"), *flag], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    where = f"--address {address}" if how == "flag" else f"RAY_ADDRESS={address}"
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"ndebench run: error: {where} ")
    assert needle in lines[0]
    assert not imported & {"ray", "torch", "mlflow"}
    assert list(tmp_path.iterdir()) == []


def test_other_url_schemes_are_refused_and_gcs_addresses_pass(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ValueError, match=r"--address gcs://a:1: Ray takes HOST:PORT \(the GCS, e.g. a:6379\)"):
        ray_address("gcs://a:1")
    assert ray_address("10.0.0.1:6379") == "10.0.0.1:6379"
