"""Preflight of a multi-node Ray cluster: every node must reach the same tracking store, storage and data.

On one node everything is local and nothing is checked. With more than one alive node, a ``sqlite:``
tracking URI (each node would write its own database file), a storage path that a worker node does not
see, or a data directory a worker node cannot read stop the sweep before any trial starts, each with the
flag that fixes it.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

NodeCheck = Callable[[list[str], str], dict[str, bool]]


class ClusterError(RuntimeError):
    """The cluster cannot run this sweep as configured; the message names the flag that fixes it."""


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def _path_exists(path: str) -> bool:
    return Path(path).exists()


def paths_seen_by_nodes(node_ids: list[str], path: str) -> dict[str, bool]:
    """Whether ``path`` exists as seen from each node, checked by a zero-CPU task pinned to that node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_path_exists)
    refs = {
        node: probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(path)
        for node in node_ids
    }
    return {node: bool(ray.get(ref, timeout=120)) for node, ref in refs.items()}


def _is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> Path:
    return Path(path[len("file://"):] if path.startswith("file://") else path)


def check_cluster(
    tracking_uri: str,
    storage_path: str,
    data_dir: str | None,
    *,
    nodes: list[dict[str, Any]] | None = None,
    node_check: NodeCheck = paths_seen_by_nodes,
) -> int:
    """Refuse a multi-node sweep whose tracking store, storage or data are not shared; return the node count.

    ``storage_path`` may be an object-store URI (``s3://``, ``gs://``: shared by nature) or a folder, which
    must be the same shared folder on every node: a marker file written here must be visible from each
    node. ``data_dir`` must exist on every node.
    """
    nodes = alive_nodes() if nodes is None else nodes
    if len(nodes) <= 1:
        return len(nodes)
    node_ids = [node["NodeID"] for node in nodes]
    if tracking_uri.startswith("sqlite:"):
        raise ClusterError(
            f"the Ray cluster has {len(nodes)} nodes but the tracking URI {tracking_uri!r} is a sqlite file: every "
            "node would write its own database. Start `ndebench server` on the head node and pass the "
            "--tracking-uri http://HEAD:PORT it prints"
        )
    if not _is_uri(storage_path):
        folder = _local(storage_path)
        folder.mkdir(parents=True, exist_ok=True)
        marker = folder / f".ndebench-shared-{uuid.uuid4().hex}"
        marker.touch()
        try:
            missing = [n for n, seen in node_check(node_ids, str(marker.resolve())).items() if not seen]
        finally:
            marker.unlink(missing_ok=True)
        if missing:
            raise ClusterError(
                f"--storage-path {storage_path!r} is not shared: {len(missing)} of {len(nodes)} node(s) "
                f"({', '.join(missing[:3])}) do not see it. Pass a folder mounted on every node (NFS) or an "
                "object-store URI (s3://bucket/path) as --storage-path"
            )
    missing = [] if data_dir is None else [n for n, seen in node_check(node_ids, data_dir).items() if not seen]
    if missing:
        raise ClusterError(
            f"--data-dir {data_dir!r} does not exist on {len(missing)} of {len(nodes)} node(s) "
            f"({', '.join(missing[:3])}). Put the data at the same path on every node (or a shared mount) and "
            "pass it as --data-dir"
        )
    return len(nodes)
