"""What the stages of one sweep share: the spec, the tracking store, the storage, Ray, and the cells failed so far.

:class:`StageContext` places trials on the cluster (CPU or GPU), builds the trainable, runs one Ray Tune run per
stage, and records a cell that yields no usable trial as failed, so that the sweep goes on without it.
"""
from __future__ import annotations

import gc
import math
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ndebench.datasets.files import resolve_data_dir
from ndebench.datasets.registry import dataset_info
from ndebench.platform.cluster.joining import gpu_request
from ndebench.platform.cluster.preflight import shared_folder
from ndebench.platform.cluster.raysession import RaySession
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.engine.entry import trial_entry
from ndebench.platform.engine.provenance import driver_provenance
from ndebench.platform.engine.trainable import full_config
from ndebench.platform.record.interruption import interrupt_run
from ndebench.platform.record.lease.heartbeat import Lease
from ndebench.platform.record.tracking import close_orphaned_runs, finish_cell
from ndebench.platform.spec.config import SweepSpec, config_hash
from ndebench.platform.spec.plan import Cell, base_key, cell_template, fixed_key

Printer = Callable[[str], None]
# (the study's evaluate runs, the cells as (model, dataset, regularizer), the test) -> each cell's metrics; the
# entry layer passes the report wing's, so that the engine records the report's numbers without importing it.
CellStatistics = Callable[[Any, list[tuple[str, str, str]], str], dict[tuple[str, str, str], dict[str, float]]]
LISTED = 12


def trial_dirname(trial: Any) -> str:
    """A trial's folder under the storage path: its id, as Ray's logs and errors name it. Ray's default adds up to
    130 characters of the config and a timestamp, unreadable with our flat ``section.key`` configs."""
    return trial.trial_id


def usable(result: dict[str, Any], metric: str) -> bool:
    """A trial result the search can pick: ``ok`` with a finite ``metric``."""
    value = result.get(metric)
    return result.get("status") == "ok" and value is not None and math.isfinite(value)


class StageContext:
    """The state and the Ray Tune plumbing every stage of one sweep of ``spec`` uses."""

    def __init__(self, spec: SweepSpec, *, tracking_uri: str, storage_path: str | Path, address: str | None,
                 resume: bool, data_dir: str | None, printer: Printer, verbose: bool, progress_every_s: float,
                 retry_diverged: bool, cell_statistics: CellStatistics | None, single_node: bool = False):
        self.spec, self.tracking_uri, self.resume = spec, tracking_uri, resume
        self.address, self.single_node = address, single_node
        self.storage = Storage(storage_path)
        # Resolved on the driver (flag > config > $NDEBENCH_DATA_DIR > ./data) and made absolute, since
        # Ray trials run in their own working directories, possibly on other nodes.
        self.data_dir = str(resolve_data_dir(data_dir or spec.data_dir).resolve())
        self.say, self.verbose, self.progress_every_s = printer, verbose, progress_every_s
        self.retry_diverged = retry_diverged
        self.ray = RaySession(address, verbose, printer)
        self.cell_statistics = cell_statistics
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.failed: dict[str, str] = {}
        self.infrastructure: list[str] = []  # failures of trials that spent their retries on the infrastructure
        self.evaluated: dict[str, dict[str, Any]] = {}
        self.study_run_id = ""
        self.lease: Lease | None = None  # set by the sweep once it holds the study

    def place(self, gpus_available: float) -> None:
        """GPU requests are kept (a joined cluster may add GPU nodes) or refused; never dropped silently."""
        self.gpu, message = gpu_request(self.spec.resources.gpu, gpus_available, bool(self.address))
        if message:
            self.say(message)
        self.device = "cuda" if self.gpu > 0 else "cpu"

    def resolve(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` as a trial runs it: with the driver's data directory, the device and its thread count."""
        config = dict(config, data_dir=self.data_dir, device=self.device)
        # torch defaults to one thread per core of the node, so concurrent trials would oversubscribe it; a
        # trial uses the CPUs Ray reserved for it.
        config.setdefault("training.threads", max(1, int(self.spec.resources.cpu)))
        return config

    def trainable_for(self, stage: str, parents: dict[str, str],
                      evaluate_configs: dict[str, dict[str, Any]] | None = None,
                      resume_runs: dict[str, str] | None = None,
                      templates: dict[str, dict[str, Any]] | None = None) -> Any:
        """The trainable of ``stage`` with its trial runs under the cell runs ``parents``, on the resources placed;
        ``resume_runs`` (config hash -> run id): the unfinished runs of earlier drivers its trials continue;
        ``templates`` (cell key -> fixed values): what completes a search trial's config."""
        from ray import tune

        fn = tune.with_parameters(
            trial_entry, tracking_uri=self.tracking_uri, parents=parents, evaluate_configs=evaluate_configs,
            resume_runs=resume_runs or {}, templates=templates or {}, run_tags=driver_provenance() | self.lease_tag(),
            storage_uri=self.storage.uri, experiment=self.experiment(stage),
            checkpoint_every=self.spec.tune.checkpoint_every, save_weights=self.spec.evaluate.save_weights,
            plugins=self.spec.plugins, node_check=self.node_check(),
            system_metrics=self.spec.resources.system_metrics, trial_timeout_s=self.spec.tune.trial_timeout_s,
        )
        return tune.with_resources(fn, {"cpu": self.spec.resources.cpu, "gpu": self.gpu})

    def lease_tag(self) -> dict[str, str]:
        """``lease``, ``lease_id`` and ``lease_experiment``: the epoch, claim id and experiment id of this driver's
        lease, on every trial run it writes (its fencing token; a trial checks it in that experiment)."""
        if self.lease is None:
            return {}
        return {"lease": str(self.lease.epoch), "lease_id": self.lease.lease_id,
                "lease_experiment": str(self.lease.experiment_id)}

    def node_check(self) -> tuple[str | None, str | None] | None:
        """What a trial checks on its node before it starts: on a joined cluster, nodes may join after the
        preflight."""
        if not self.address or self.single_node:
            return None
        return shared_folder(self.storage.uri), self.data_dir if Path(self.data_dir).exists() else None

    def experiment(self, stage: str) -> str:
        """Ray Tune's experiment (folder) name of ``stage`` in this sweep."""
        return f"{self.spec.study}/{stage}-{self.stamp}"

    def fit(self, stage: str, fn: Any, tune_config: Any, param_space: dict[str, Any], callbacks: list[Any]) -> Any:
        """One Ray Tune run; Ray's console output goes to the sweep's log file unless ``verbose``."""
        from ray import tune

        if self.lease is not None:
            from ndebench.platform.engine.leasewatch import LeaseWatch

            callbacks = [*callbacks, LeaseWatch()]
        run_config = tune.RunConfig(
            name=self.experiment(stage), storage_path=self.storage.root,
            storage_filesystem=self.storage.fs, verbose=2 if self.verbose else 0, callbacks=callbacks,
            failure_config=tune.FailureConfig(max_failures=self.spec.tune.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        )
        tuner = tune.Tuner(fn, param_space=param_space, tune_config=tune_config, run_config=run_config)
        # Ray Tune's own SIGINT handler would end only this stage and let the sweep go on: Ctrl-C raises
        # KeyboardInterrupt instead, so the whole command stops (`ndebench run` exits 130).
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
        # Tune's automatic CSV, JSON and TensorBoard loggers write every result of every trial again, beside
        # MLflow, and the driver pays for them (about 8 ms a trial) and reads them all back when the run ends.
        os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
        if not gc.get_freeze_count():
            # What the driver holds by now (torch, Ray Tune, MLflow, pandas: millions of objects) lives as long as
            # it does; frozen, it is not walked again by every full collection of Tune's loop (docs/performance.md).
            gc.freeze()
        grid = self.ray.fit(tuner)
        for callback in callbacks:
            self._cut_off(stage, getattr(callback, "outcomes", {}))
        return grid

    def _cut_off(self, stage: str, outcomes: dict[str, list[dict[str, Any]]]) -> None:
        """Trials whose retries an infrastructure failure spent: their runs closed ``interrupted`` (``--resume``
        continues them), never ``error``, and the failure kept for the sweep's exit code (3)."""
        failures = [o["infrastructure"] for group in outcomes.values() for o in group if o.get("infrastructure")]
        for failure in failures:
            for run_id in dict.fromkeys([failure["run_id"], *failure.get("run_ids", [])]):
                if run_id:
                    interrupt_run(self.tracking_uri, run_id, f"infrastructure failure: {failure['cause']}")
        if failures:
            self.infrastructure += [failure["cause"] for failure in failures]
            self.say(f"stage {stage}: {len(failures)} trial(s) stopped by an infrastructure failure after their "
                     f"retries, their runs closed as interrupted: {failures[0]['cause']}")

    def cell_tags(self, cell: Cell) -> dict[str, str]:
        """Identity, the dataset's primary metric and the driver's provenance (a cell run is written by the driver)."""
        tags = {"model": cell.model, "dataset": cell.dataset, "regularizer": cell.regularizer,
                "metric": dataset_info(cell.dataset).metric}
        tags |= driver_provenance() | {"host": socket.gethostname()}
        return tags | ({"variant": cell.variant} if cell.variant else {})

    def close_orphans(self, phase: str, outcomes: dict[str, list[dict[str, Any]]],
                      trials: dict[str, dict[str, Any]] | None = None,
                      templates: dict[str, dict[str, Any]] | None = None) -> None:
        """Close as ``error`` this driver's trial runs of ``phase`` (its lease epoch) whose worker died before
        recording an outcome, with the reason Ray gave for that trial (configs completed as the trainable does:
        ``trials``, ``templates``)."""
        reasons = {}
        for outcome in (o for group in outcomes.values() for o in group if o["error"]):
            reasons[config_hash(full_config(outcome["config"], trials, templates))] = outcome["error"]
        closed = close_orphaned_runs(self.tracking_uri, self.spec.study, phase, reasons,
                                     tags={"kind": "trial"} | self.lease_tag())
        if closed:
            self.say(f"stage {phase}: {len(closed)} trial(s) lost their worker; their MLflow runs are closed as error "
                     "with Ray's reason (`ndebench report` lists them)")

    def fail(self, key: str, label: str, run_id: str, stage: str, outcomes: list[dict[str, Any]],
             reason: str | None = None, status: str = "failed") -> None:
        """Record a cell that did not finish (``status`` ``failed``, or ``interrupted`` where ``--resume``
        continues it): ``reason``, else (no usable trial) the first error message of its ``outcomes``, on its cell
        run and in the outcome."""
        messages = [o["error"] or o["result"].get("message", "") for o in outcomes]
        statuses = sorted({o["result"].get("status", "error") for o in outcomes})
        first = reason or next((m for m in messages if m),
                               f"no trial finished ok (statuses: {', '.join(statuses) or 'none ran'})")
        message = f"{stage}: {first}"
        self.failed[key] = message
        finish_cell(self.tracking_uri, run_id, status, error=message)
        self.say(f"  {status.upper()} {label}: {message}")

    def say_reruns(self, reasons: dict[tuple[str, int | str], str], kept: int) -> None:
        """What ``--resume`` reruns and why (per cell and seed, or per cell of a search stage), and how many
        diverged runs it keeps."""
        for (label, seed), why in list(reasons.items())[:LISTED]:
            self.say(f"  rerun {label}{'' if seed == '' else f' seed {seed}'}: {why}")
        if len(reasons) > LISTED:
            self.say(f"  ... and {len(reasons) - LISTED} more")
        if kept:
            self.say(f"  {kept} diverged run(s) kept as results (same config and code); --retry-diverged reruns them")

    def final_configs(self, cells: list[Cell], base: dict[str, dict[str, Any]],
                      tuned: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The evaluated config of every cell: its template, the base stage's values (paper), its own search."""
        out = {}
        for cell in cells:
            pair_key = base_key(self.spec, cell)
            if cell.key in self.failed:
                continue
            if self.spec.protocol == "paper" and pair_key in self.failed:
                self.failed[cell.key] = f"base stage of {cell.model} x {cell.dataset} failed: {self.failed[pair_key]}"
                continue
            config = cell_template(self.spec, cell)
            if self.spec.protocol == "paper":
                config.update(base.get(pair_key, {}))
            config.update(tuned.get(cell.key, {}))
            # a variant's fixed values (e.g. model.hidden_size) win over what the base stage chose
            config.update({fixed_key(k): v for k, v in cell.fixed})
            out[cell.key] = self.resolve(config)
        return out
