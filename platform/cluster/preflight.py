"""Preflight of a joined Ray cluster: every node must reach the same tracking store, storage and data.

A joined cluster may have one node now and more later (autoscaling), so the rules do not depend on the node
count: a ``sqlite:`` tracking URI (each node would write its own database file), a storage path that a node
does not see, or a data directory a node cannot read stop the sweep before any trial starts, each with the flag
that fixes it. ``single_node`` (``--single-node``) opts out for a cluster the user knows stays one machine.
Nodes that join later are checked by each trial on its own node (:mod:`ndebench.platform.cluster.joining`).
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ndebench.platform.cluster.joining import STORAGE_MARKER

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


def shared_folder(storage_path: str) -> str | None:
    """The folder behind a ``--storage-path`` that must be shared, or ``None`` for an object store."""
    return None if _is_uri(storage_path) else str(_local(storage_path))


def refuse_sqlite(tracking_uri: str, nodes: str = "") -> None:
    """A sweep that joins a Ray cluster (``--address``, ``$RAY_ADDRESS``) without ``--single-node`` cannot write to
    a sqlite file: raise :class:`ClusterError` before anything (the study's lease included) creates it."""
    if tracking_uri.startswith("sqlite:"):
        raise ClusterError(
            f"the sweep joins a Ray cluster ({nodes + ', ' if nodes else ''}more nodes may join) but the tracking "
            f"URI {tracking_uri!r} is a sqlite file: every node would write its own database. Start `ndebench "
            "server` on the head node and pass the --tracking-uri http://HEAD:PORT it prints (or set "
            "MLFLOW_TRACKING_URI), or pass --single-node for a cluster that stays one machine"
        )


def check_cluster(
    tracking_uri: str,
    storage_path: str,
    data_dir: str | None,
    *,
    nodes: list[dict[str, Any]] | None = None,
    node_check: NodeCheck = paths_seen_by_nodes,
    single_node: bool = False,
) -> int:
    """Refuse a sweep on a joined cluster whose tracking store, storage or data are not shared; return the node
    count.

    ``storage_path`` may be an object-store URI (``s3://``, ``gs://``: shared by nature) or a folder, which
    must be the same shared folder on every node: a marker file written here must be visible from each
    node; a second marker stays for trials on nodes that join later. ``data_dir`` must exist on every node.
    With ``single_node`` nothing is checked.
    """
    nodes = alive_nodes() if nodes is None else nodes
    if single_node:
        return len(nodes)
    node_ids = [node["NodeID"] for node in nodes]
    refuse_sqlite(tracking_uri, f"{len(nodes)} node(s) now")
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
        (folder / STORAGE_MARKER).touch()
    missing = [] if data_dir is None else [n for n, seen in node_check(node_ids, data_dir).items() if not seen]
    if missing:
        raise ClusterError(
            f"--data-dir {data_dir!r} does not exist on {len(missing)} of {len(nodes)} node(s) "
            f"({', '.join(missing[:3])}). Put the data at the same path on every node (or a shared mount) and "
            "pass it as --data-dir"
        )
    return len(nodes)
