"""Cluster preflight and provenance tags."""
from __future__ import annotations

import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from ndebench.platform.cluster.joining import NodeNotReady, check_this_node
from ndebench.platform.cluster.preflight import ClusterError, check_cluster
from ndebench.platform.engine.provenance import LIBRARIES, driver_provenance, git_state, worker_provenance

REPO = Path(__file__).resolve().parent.parent
TWO_NODES = [{"NodeID": "node-a", "Alive": True}, {"NodeID": "node-b", "Alive": True}]


def _sees_all(node_ids: list[str], path: str) -> dict[str, bool]:
    return {node: Path(path).exists() for node in node_ids}


def _b_sees_nothing(node_ids: list[str], path: str) -> dict[str, bool]:
    return {node: node == "node-a" and Path(path).exists() for node in node_ids}


def test_joined_cluster_of_one_node_still_refuses_sqlite(tmp_path):
    """An autoscaling cluster starts head-only: nodes that join later would write their own sqlite file."""
    nodes = [{"NodeID": "only", "Alive": True}]
    with pytest.raises(ClusterError, match="--single-node"):
        check_cluster("sqlite:///x.db", str(tmp_path / "s"), str(tmp_path), nodes=nodes, node_check=_sees_all)


def test_a_sweep_joining_a_cluster_refuses_sqlite_before_its_lease_creates_the_file(tmp_path):
    from ndebench.platform.engine.sweep import Sweep
    from ndebench.platform.spec.config import load_spec

    config = tmp_path / "c.yaml"
    config.write_text("study: s\nmodels: [neural_ode]\ndatasets: [synthetic]\nregularizers: [none]\n")
    database = tmp_path / "local.db"
    sweep = Sweep(load_spec(config), tracking_uri=f"sqlite:///{database}", storage_path=str(tmp_path / "r"),
                  address="127.0.0.1:6379")
    with pytest.raises(ClusterError, match="--single-node"):
        sweep.run()
    assert not database.exists()


def test_single_node_opts_out_of_every_check(tmp_path):
    nodes = [{"NodeID": "only", "Alive": True}]
    assert check_cluster("sqlite:///x.db", str(tmp_path / "s"), str(tmp_path / "absent"), nodes=nodes,
                         node_check=_b_sees_nothing, single_node=True) == 1


def test_shared_storage_keeps_a_marker_that_late_nodes_check(tmp_path):
    storage, data = tmp_path / "results", tmp_path / "data"
    data.mkdir()
    check_cluster("http://h:5000", str(storage), str(data), nodes=TWO_NODES, node_check=_sees_all)
    check_this_node(str(storage), str(data))
    with pytest.raises(NodeNotReady, match="--storage-path"):
        check_this_node(str(tmp_path / "elsewhere"), str(data))
    with pytest.raises(NodeNotReady, match="--data-dir"):
        check_this_node(str(storage), str(tmp_path / "nodata"))


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


@pytest.mark.system
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


def test_a_change_anywhere_in_the_checkout_makes_the_package_folder_dirty(tmp_path):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    package, models = tmp_path / "platform", tmp_path / "models"
    package.mkdir(), models.mkdir()
    (package / "a.py").write_text("A = 1\n"), (models / "b.py").write_text("B = 1\n")
    git("init", "-q"), git("add", "."), git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    assert git_state(package)[1] is False
    (models / "b.py").write_text("B = 2\n")  # a sibling folder of the package, as models/ is of platform/
    assert git_state(package)[1] is True
    git("checkout", "--", "models/b.py")
    (tmp_path / "notes.txt").write_text("untracked at the root\n")
    assert git_state(package)[1] is True


def test_worker_provenance_outside_ray():
    tags = worker_provenance("cpu")
    assert tags["host"] == socket.gethostname()
    assert tags["node"] == "local"
    assert tags["device"].startswith("cpu: ") and len(tags["device"]) > 5
