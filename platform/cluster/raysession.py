"""The sweep's Ray session: starting or joining Ray, and capturing this driver's Ray output in one log file.

Ray's console output (experiment boxes, result paths, its loggers' handlers) goes to a log file unless
``verbose``; only the sweep's own progress lines reach the console. The capture lives in a private temporary
folder that goes when the driver exits (after a SIGKILL, when the next driver on this host starts); the sweep
saves its redacted copy under the storage path.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ndebench.platform.cluster.joining import init_arguments, loopback_only
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.cluster.sweeplog import write_private
from ndebench.platform.failures.leftovers import DRIVER_LOG, process_folder, remove_orphaned
from ndebench.platform.failures.outage import InfrastructureError, cause_line
from ndebench.platform.failures.stopping import reclaim

TOKEN_WARNING = "Token authentication is enabled for this Ray cluster"


class RaySession:
    """Ray on this machine (``address`` None) or the cluster at ``address``, with its output captured."""

    def __init__(self, address: str | None, verbose: bool, say: Callable[[str], None]):
        self.address, self.verbose, self.say = address, verbose, say

    def start(self) -> dict[str, float]:
        """Start (or join) Ray, with its output going to the log; returns the cluster's resources. Raises
        :class:`~ndebench.platform.failures.outage.InfrastructureError` when Ray does not start (exit 3)."""
        import ray

        logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
            lambda record: TOKEN_WARNING not in record.getMessage())
        self._console = sys.stdout
        remove_orphaned()
        # Removed when this session is collected or the driver exits: save_log keeps what the user needs.
        self._log_dir = process_folder(DRIVER_LOG)
        self._driver_log = Path(self._log_dir.name) / "driver.log"
        self._console_log = self._driver_log.with_name("console.log")
        self._driver_handler = logging.FileHandler(self._driver_log)
        self._driver_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("ray").addHandler(self._driver_handler)
        if not ray.is_initialized():
            try:
                with loopback_only(self.address):
                    ray.init(**init_arguments(self.address, self.verbose))
            except Exception as exc:  # noqa: BLE001 - whatever stops Ray from starting is the machine's failure
                where = f"at {self.address}" if self.address else "on this machine"
                raise InfrastructureError(f"Ray {where} did not start: {cause_line(exc)}") from exc
            reclaim()
        resources = ray.cluster_resources()
        self.say(f"Ray cluster: {resources.get('CPU', 0):g} CPU, {resources.get('GPU', 0):g} GPU")
        return resources

    def stop(self) -> None:
        """Disconnect from Ray (a local Ray ends with its workers; a cluster ends this driver's trials). A local
        Ray's workers stopped inside ``tune.report`` leave their checkpoint staging folders: removed here."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.address is None:
            remove_orphaned()

    @staticmethod
    def node_resources() -> list[dict[str, float]]:
        """The resources of every live node."""
        import ray

        return [node["Resources"] for node in ray.nodes() if node.get("Alive")]

    def fit(self, tuner: Any) -> Any:
        """``tuner.fit()``, with Ray's console output in the log file unless ``verbose``."""
        if self.verbose:
            return tuner.fit()
        ray_logger = logging.getLogger("ray")
        consoles = [h for h in ray_logger.handlers if not isinstance(h, logging.FileHandler)]
        levels = [h.level for h in consoles]
        for handler in consoles:
            handler.setLevel(logging.CRITICAL)
        # Ray prints its experiment box, result paths and TensorBoard hints whatever the verbosity.
        with self._console_log.open("a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                return tuner.fit()
            finally:
                for handler, level in zip(consoles, levels, strict=True):
                    handler.setLevel(level)

    def say_console(self, message: str) -> None:
        """Progress lines reach the console even while Ray's own output is redirected to the log."""
        with contextlib.redirect_stdout(self._console):
            self.say(message)

    def log_text(self) -> str:
        """Ray's output of this session that belongs to this driver, one section per file: its own log and
        console capture, and the node's log files of this job (``worker-*-<job id>-*`` and their core worker
        logs, this driver's core worker log); never other jobs' files or the node's agents' logs (the
        runtime-env agent prints every job's ``env_vars``)."""
        import ray

        logging.getLogger("ray").removeHandler(self._driver_handler)
        self._driver_handler.close()
        node = getattr(ray._private.worker, "_global_node", None)
        paths = [self._driver_log, self._console_log]
        if node is not None and ray.is_initialized():
            job = ray.get_runtime_context().get_job_id()
            logs = Path(node.get_logs_dir_path())
            workers = sorted(logs.glob(f"worker-*-{job}-*"))
            # worker-<worker id>-<job id>-<pid>.out: its core worker's log is python-core-worker-<worker id>_<pid>.log
            cores = {logs / f"python-core-worker-{w.name.split('-')[1]}_{w.stem.rsplit('-', 1)[1]}.log"
                     for w in workers}
            paths += [*workers, *sorted(cores), *logs.glob(f"python-core-driver-*_{os.getpid()}.log")]
        chunks = []
        for path in paths:
            if path.exists() and path.suffix in (".out", ".err", ".log") and path.stat().st_size:
                chunks.append(f"===== {path.name} =====\n{path.read_text(errors='replace')}")
        return "\n".join(chunks)

    def save_log(self, storage: Storage, *parts: str) -> str:
        """:meth:`log_text`, secrets redacted, in an owner-only file ``parts`` under ``storage``; its URI."""
        return write_private(storage, self.log_text(), *parts)
