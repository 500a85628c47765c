"""Cluster preflight, provenance tags and the MLflow tracking server command."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import pytest

from ndebench.platform.cluster import ClusterError, check_cluster
from ndebench.platform.provenance import LIBRARIES, driver_provenance, git_state, worker_provenance
from ndebench.platform.server import default_settings, server_command

REPO = Path(__file__).resolve().parent.parent
TWO_NODES = [{"NodeID": "node-a", "Alive": True}, {"NodeID": "node-b", "Alive": True}]


def _sees_all(node_ids: list[str], path: str) -> dict[str, bool]:
    return {node: Path(path).exists() for node in node_ids}


def _b_sees_nothing(node_ids: list[str], path: str) -> dict[str, bool]:
    return {node: node == "node-a" and Path(path).exists() for node in node_ids}


def test_single_node_needs_nothing_shared(tmp_path):
    nodes = [{"NodeID": "only", "Alive": True}]
    assert check_cluster("sqlite:///x.db", str(tmp_path / "s"), str(tmp_path / "absent"), nodes=nodes) == 1


def test_multi_node_refuses_sqlite(tmp_path):
    with pytest.raises(ClusterError, match="--tracking-uri"):
        check_cluster("sqlite:////tmp/x.db", str(tmp_path), str(tmp_path), nodes=TWO_NODES, node_check=_sees_all)


def test_multi_node_refuses_unshared_storage_and_leaves_no_marker(tmp_path):
    storage = tmp_path / "results"
    with pytest.raises(ClusterError, match="--storage-path") as err:
        check_cluster("http://127.0.0.1:5000", str(storage), str(tmp_path), nodes=TWO_NODES,
                      node_check=_b_sees_nothing)
    assert "node-b" in str(err.value) and "node-a" not in str(err.value)
    assert list(storage.iterdir()) == []


def test_multi_node_refuses_missing_data_dir(tmp_path):
    with pytest.raises(ClusterError, match="--data-dir"):
        check_cluster("http://127.0.0.1:5000", str(tmp_path), str(tmp_path / "nope"), nodes=TWO_NODES,
                      node_check=_sees_all)


def test_object_store_storage_counts_as_shared(tmp_path):
    seen: list[str] = []

    def record(node_ids, path):
        seen.append(path)
        return dict.fromkeys(node_ids, True)

    assert check_cluster("http://h:5000", "s3://bucket/results", str(tmp_path), nodes=TWO_NODES, node_check=record) == 2
    assert seen == [str(tmp_path)]


def test_real_two_node_probe(tmp_path):
    """The per-node probe runs on each node of a real two-node Ray cluster (both on this machine)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": 80 * 1024**2})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=80 * 1024**2)
        ray.init(address=cluster.address)
        cluster.wait_for_nodes()
        assert check_cluster("http://127.0.0.1:5000", str(tmp_path / "s"), str(tmp_path)) == 2
        with pytest.raises(ClusterError, match="2 of 2 node"):
            check_cluster("http://127.0.0.1:5000", str(tmp_path / "s"), str(tmp_path / "missing"))
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_driver_provenance_names_code_and_libraries():
    tags = driver_provenance()
    assert tags["version"] == version("ndebench")
    commit, dirty = git_state(REPO)
    expected = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if expected.returncode == 0:
        assert tags["git_commit"] == commit == expected.stdout.strip()
        assert tags["git_dirty"] == str(dirty).lower()
    assert {f"lib.{name}" for name in LIBRARIES} <= set(tags)
    assert tags["lib.torch"] == version("torch")
    assert tags["python"] == ".".join(map(str, sys.version_info[:3]))


def test_git_state_outside_a_checkout(tmp_path):
    assert git_state(tmp_path) == ("unknown", None)


def test_worker_provenance_outside_ray():
    tags = worker_provenance("cpu")
    assert tags["host"] == socket.gethostname()
    assert tags["node"] == "local"
    assert tags["device"].startswith("cpu: ") and len(tags["device"]) > 5


def test_server_command_allows_the_public_name(tmp_path):
    settings = default_settings(tmp_path, port=5123, public_host="head.cluster")
    command = server_command(settings)
    assert settings.tracking_uri == "http://head.cluster:5123"
    hosts = command[command.index("--allowed-hosts") + 1].split(",")
    assert {"head.cluster", "head.cluster:5123", "localhost", "127.0.0.1"} <= set(hosts)
    assert command[command.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def test_server_serves_and_stops_with_its_parent(tmp_path):
    """`ndebench server` answers on loopback by the public name it printed and takes its workers down on SIGTERM."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "ndebench.platform.cli", "server", "--host", "127.0.0.1", "--port", str(port),
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
    output = process.stdout.read()
    assert code == 0
    assert f"--tracking-uri http://localhost:{port}" in output
    assert not any(_group_alive(pgid) for pgid in server_groups)
