"""``ndebench bench scale --trials N``: what the sweep's driver costs per trial in a stage of N trivial trials.

The trials are real (the sweep engine, its searcher and progress, the trainable, the MLflow recorder, a Tune
checkpoint per epoch) but trivial: a Neural ODE of latent size 2 trained for one epoch on 24 generated series of
8 points. They run on a simulated cluster (``ray.cluster_utils.Cluster``: ``nodes`` nodes of ``cpus_per_node``
logical CPUs, in a private temporary directory, shut down afterwards) that the driver joins as ``ndebench run
--address`` does, recording into a temporary sqlite store or the ``tracking_uri`` given (a server or a database
such as PostgreSQL, under a study name of its own).
"""
from __future__ import annotations

import contextlib
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any


def trivial_sweep(study: str, trials: int) -> dict[str, Any]:
    """The config of a sweep whose one search stage has ``trials`` trivial trials (random search over the
    learning rate of a single cell), then one evaluate run."""
    return {
        "study": study, "protocol": "joint", "models": ["neural_ode"], "datasets": ["synthetic"],
        "dataset_options": {"num_samples": 24, "length": 8}, "regularizers": {"none": {}},
        "model": {"hidden_size": 2, "num_layers": 1},
        "training": {"lr": {"loguniform": [1.0e-3, 1.0e-1]}, "epochs": 1, "min_epochs": 1, "batch_size": 16,
                     "threads": 1},
        "solver": {"method": "euler"},
        "tune": {"sampler": "random", "num_samples": trials, "seed": 0},
        "evaluate": {"seeds": [0], "save_weights": False},
        "resources": {"cpu": 1, "gpu": 0, "system_metrics": False},
        "report": {"figures": "none"},
    }


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_trials(trials: int, *, nodes: int = 2, cpus_per_node: int = 2, tracking_uri: str | None = None,
                 say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run :func:`trivial_sweep` of ``trials`` trials on a simulated cluster and measure its driver (this process).

    ``wall_s``: seconds of the sweep (Ray joined, the search stage, the evaluate stage, the cell runs closed);
    ``overhead_ms_per_trial``: the driver's CPU time (user + system, all its threads) over the same span divided
    by ``trials``, so it also carries the sweep's fixed costs; ``driver_peak_rss_mb``: the process's peak
    resident memory (``getrusage`` ``ru_maxrss``), imports included. ``tracking_uri``: the store (default: a
    temporary sqlite file), where the study is named ``bench-trials-N-<random>``."""
    import ray
    from ndebench.platform import api
    from ray.cluster_utils import Cluster

    with tempfile.TemporaryDirectory(prefix="ndebench-trials-") as tmp:
        study = f"bench-trials-{trials}" + (f"-{uuid.uuid4().hex[:8]}" if tracking_uri else "")
        spec = api.load(trivial_sweep(study, trials))
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": cpus_per_node, "temp_dir": os.path.join(tmp, "ray"), "include_dashboard": False,
            "object_store_memory": 128 * 1024**2})
        try:
            for _ in range(nodes - 1):
                cluster.add_node(num_cpus=cpus_per_node, temp_dir=os.path.join(tmp, "ray"),
                                 object_store_memory=128 * 1024**2)
            say(f"simulated cluster: {nodes} node(s) x {cpus_per_node} CPU(s) at {cluster.address}; "
                f"{trials} trivial trial(s) in one stage")
            cpu, start = _cpu_s(), time.perf_counter()
            with contextlib.redirect_stdout(sys.stderr):
                outcome = api.sweep(spec, uri=tracking_uri or f"sqlite:///{os.path.join(tmp, 'mlflow.db')}",
                                    storage_path=os.path.join(tmp, "ray_results"), address=cluster.address,
                                    single_node=True)
            wall, cpu = time.perf_counter() - start, _cpu_s() - cpu
        finally:
            with contextlib.suppress(Exception):  # the cluster's processes go down whatever the driver's state
                ray.shutdown()
            cluster.shutdown()
    if outcome.failed:
        raise RuntimeError(f"bench scale --trials: cells failed: {outcome.failed}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    say(f"{trials} trials in {wall:.1f} s; driver CPU {1000 * cpu / trials:.1f} ms per trial, peak RSS {peak:.0f} MB")
    return {"trials": trials, "wall_s": round(wall, 2), "overhead_ms_per_trial": round(1000 * cpu / trials, 2),
            "driver_peak_rss_mb": round(peak, 1)}
