"""CPU, memory, disk, network and GPU metrics (``system/*``) on a trial's MLflow run, sampled by MLflow's own
monitor while the trial trains. Needs psutil (and nvidia-ml-py for GPUs), which the ``cluster`` extra installs;
without psutil, or with ``resources.system_metrics: false``, nothing is sampled."""
from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator


def available() -> bool:
    """Whether MLflow's system-metrics monitor can run here (psutil is importable)."""
    return importlib.util.find_spec("psutil") is not None


@contextlib.contextmanager
def system_metrics(run_id: str, tracking_uri: str, enabled: bool = True, interval_s: float = 10.0,
                   check: Callable[[], None] | None = None) -> Iterator[None]:
    """Sample system metrics into run ``run_id`` every ``interval_s`` seconds while the block runs; ``check``
    (the trial's lease fence) is called before each batch, and the sampling ends once it raises."""
    if not enabled or not available():
        yield
        return
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    class FencedMonitor(SystemMetricsMonitor):
        def publish_metrics(self, metrics):
            if check is not None:
                check()
            super().publish_metrics(metrics)

    # resume_logging continues the step count of a trial resumed into the same run.
    monitor = FencedMonitor(run_id, sampling_interval=interval_s, resume_logging=True, tracking_uri=tracking_uri)
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()
