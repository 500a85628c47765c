"""Which Ray cluster a sweep runs on, set the ways Ray users set it, and what joining one implies.

``--address`` defaults to ``$RAY_ADDRESS`` (which ``ray job submit`` sets for its entrypoint), so a sweep inside
a Ray Job joins the job's cluster. Without either, a private local Ray is started (``address="local"``), never
a cluster that happens to run on this machine, and bound to the loopback: every port it opens (the GCS, the
raylet, the object manager, the workers, the dashboard and runtime-env agents) listens on 127.0.0.1 only, as Ray
does on macOS and Windows. A joined cluster may grow (autoscaling, late ``ray start``), so
the multi-node rules apply to it whatever the number of nodes alive now, and each trial re-checks on its own
node that the storage and data are there before it starts.
"""
from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Written into the storage root by the driver of a joined sweep; a trial on a node that does not see it is on a
# node without the shared storage.
STORAGE_MARKER = ".ndebench-storage"


def ray_address(flag: str | None) -> str | None:
    """The cluster to join: ``--address``, else ``$RAY_ADDRESS``, else ``None`` (start a local Ray).

    Raises ``ValueError`` (exit 2, before Ray starts) for the two addresses Ray users set for other tools: the
    dashboard's ``http(s)://HOST:8265`` (job submission) and a ``ray://`` Ray Client address."""
    address = flag or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        return None
    where = f"--address {address}" if flag else f"RAY_ADDRESS={address}"
    scheme, sep, _ = address.partition("://")
    host = (urlsplit(address).hostname if sep else None) or "HEAD_IP"
    if scheme in ("http", "https"):
        raise ValueError(f"{where} is the Ray dashboard's job-submission address, which `ray job submit` uses; a "
                         f"sweep joins the cluster's GCS instead: set {host}:6379 (or `auto` on a cluster node)")
    if scheme == "ray":
        raise ValueError(f"{where} is a Ray Client address, which does not suit Ray Tune (the driver must run on "
                         f"the cluster): set the GCS address {host}:6379 on a cluster node (or `auto`), or start "
                         "the sweep with `ray job submit`")
    if sep:
        raise ValueError(f"{where}: Ray takes HOST:PORT (the GCS, e.g. {host}:6379) or `auto`, not a "
                         f"{scheme}:// URL")
    return address


# Ray starts an idle worker per CPU when the first driver connects, for tasks and actors without a runtime
# environment. Ray Tune gives every trial actor one (its environment variables), so those workers never run a
# trial: each only costs its start (about 0.3 s of CPU) and its memory (about 80 MB resident).
LOCAL_SYSTEM_CONFIG = {"prestart_worker_first_driver": False}


def init_arguments(address: str | None, verbose: bool) -> dict[str, Any]:
    """Keyword arguments of ``ray.init`` for joining ``address`` or, with ``None``, starting a local Ray."""
    if address:
        return {"address": address, "log_to_driver": verbose}
    # Trials pass only small configs and results through the object store (data are loaded in the worker), so
    # 256 MiB is plenty; Ray's default of 30% of RAM would reserve gigabytes of /dev/shm.
    return {"address": "local", "include_dashboard": False, "object_store_memory": 256 * 1024**2,
            "log_to_driver": verbose, "_system_config": dict(LOCAL_SYSTEM_CONFIG)}


@contextlib.contextmanager
def loopback_only(address: str | None) -> Iterator[None]:
    """While a local Ray (``address`` None) starts inside this block, it takes 127.0.0.1 as the node's address, so
    that each of its processes binds there; joining ``address`` is left as it is.

    Ray 2.60 binds its servers to the node's address, which ``ray.init`` resolves to the interface that routes
    outwards, even from ``_node_ip_address="127.0.0.1"``, unless ``ray_constants.ENABLE_RAY_CLUSTER`` is off (what
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets at Ray's import, the default on macOS and Windows). Only the
    driver resolves the address; Ray's processes are handed it."""
    if address:
        yield
        return
    from ray._private import ray_constants

    enabled = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = enabled


class NodeNotReady(RuntimeError):
    """A trial was placed on a node that lacks the shared storage or the data; the message says which."""


def check_this_node(storage_root: str | None, data_dir: str | None) -> None:
    """Run in a trial before any work on a joined cluster: the node sees the shared storage (its marker file)
    and the data directory. Raises :class:`NodeNotReady` naming the node, the path and the flag to fix."""
    host = socket.gethostname()
    if storage_root and not (Path(storage_root) / STORAGE_MARKER).exists():
        raise NodeNotReady(f"node {host} does not see the shared --storage-path {storage_root!r} (its marker "
                           f"{STORAGE_MARKER} is missing): mount the same folder on every node that joins")
    if data_dir and not Path(data_dir).exists():
        raise NodeNotReady(f"node {host} has no --data-dir {data_dir!r}: put the data at the same path on every "
                           "node that joins (or a shared mount)")


def gpu_request(requested: float, visible: float, joined: bool) -> tuple[float, str | None]:
    """The GPUs per trial to ask Ray for, and a line to print. With GPUs requested and none visible, a joined
    cluster keeps the request (an autoscaler adds GPU nodes for pending trials), a local Ray refuses."""
    if requested <= 0 or visible > 0:
        return requested, None
    if joined:
        return requested, (f"resources.gpu={requested:g} requested and the cluster has no GPU now: trials wait "
                           "until GPU nodes join (autoscaling) or are started")
    raise ValueError(f"resources.gpu={requested:g} requested but this machine has no GPU visible to torch; pass "
                     "--set resources.gpu=0 to run on CPU, or --address to join a cluster with GPUs")
