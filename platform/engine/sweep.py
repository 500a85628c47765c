"""The sweep driver: the stages of :mod:`ndebench.platform.spec.plan`, each one Ray Tune run over all its cells.

Search stages (``base``, ``tune``) run every cell's trials in one ``Tuner`` through
:class:`~ndebench.platform.engine.searcher.CellSearcher` (one seeded Optuna study per cell), optionally with ASHA
per cell. ``evaluate`` runs the chosen config of every cell for every seed in one grid. MLflow: a study run,
one run per (cell, stage) under it, every trial run under its cell run. A cell whose search or evaluation
yields no usable trial is recorded as failed and the sweep goes on; ``resume`` reruns failed and unfinished
search cells, reading every finished cell's chosen config back from MLflow, and every planned evaluate
(cell, seed) without a current ``ok`` run (:func:`~ndebench.platform.engine.evaluatestage.rerun_reason`). The stages
live in :mod:`.searchstage` and :mod:`.evaluatestage`, what they share in :mod:`.stages`, Ray in
:mod:`ndebench.platform.cluster.raysession`.
"""
from __future__ import annotations

import contextlib
import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ndebench.datasets.check import preflight_problems
from ndebench.platform.cluster.joining import gpu_request, ray_address
from ndebench.platform.cluster.preflight import check_cluster, refuse_sqlite
from ndebench.platform.engine.evaluatestage import evaluate
from ndebench.platform.engine.provenance import driver_provenance
from ndebench.platform.engine.runchecks import check_resources, check_storage_writable, local_cpus, local_gpus
from ndebench.platform.engine.searchstage import close_runs_of_a_lost_driver, search_stage
from ndebench.platform.engine.stages import CellStatistics, Printer, StageContext
from ndebench.platform.failures.diskfull import disk_full, is_disk_full
from ndebench.platform.failures.stopping import describe
from ndebench.platform.record.completeness import seal_plan
from ndebench.platform.record.deletions import check_not_deleted, deleted_error
from ndebench.platform.record.interruption import mark_interrupted
from ndebench.platform.record.lease.fence import LeaseLostError, fence_writes
from ndebench.platform.record.lease.heartbeat import Lease
from ndebench.platform.record.store import ensure_experiment, sqlite_path
from ndebench.platform.record.tracking import finish_cell, search, study_run
from ndebench.platform.spec.config import SweepSpec
from ndebench.platform.spec.plan import base_key, base_stage, stage_for_cells, sweep_cells, tune_stage


def _print(message: str) -> None:
    print(f"[ndebench] {message}", flush=True)


@dataclass
class SweepOutcome:
    study: str
    chosen: dict[str, dict[str, Any]]
    evaluated: int
    skipped: int
    errors: int
    failed: dict[str, str] = field(default_factory=dict)
    log_file: str | None = None
    infrastructure: str | None = None  # what the machine failed at (a full disk), for exit code 3


class Sweep:
    """Runs a validated :class:`SweepSpec` on a local or remote Ray cluster."""

    def __init__(
        self,
        spec: SweepSpec,
        *,
        tracking_uri: str,
        storage_path: str | Path,
        address: str | None = None,
        resume: bool = False,
        data_dir: str | None = None,
        printer: Printer = _print,
        verbose: bool = False,
        progress_every_s: float = 60.0,
        retry_diverged: bool = False,
        cell_statistics: CellStatistics | None = None,
        single_node: bool = False,
    ):
        self.spec, self.address, self.single_node = spec, ray_address(address), single_node
        self.ctx = StageContext(spec, tracking_uri=tracking_uri, storage_path=storage_path, address=self.address,
                                resume=resume, data_dir=data_dir, printer=printer, verbose=verbose,
                                progress_every_s=progress_every_s, retry_diverged=retry_diverged,
                                cell_statistics=cell_statistics, single_node=single_node)
        self._lease: Lease | None = None

    def preflight(self) -> None:
        """Before Ray starts: every dataset's files are present, and a study with recorded runs continues
        only with ``resume`` (nothing is overwritten)."""
        self._check_data()
        self._check_study()

    def _check_data(self) -> None:
        missing = [problem for d in self.spec.datasets for problem in preflight_problems(d, self.ctx.data_dir)]
        if missing:
            raise FileNotFoundError("\n".join(missing))

    def _take_lease(self) -> None:
        """The study's lease (:mod:`ndebench.platform.record.lease.heartbeat`), first of all: from here on every write
        of this driver and of its trials checks it, and its Ray folders and log are named by its epoch. The lease
        lives in the study's experiment, so a deleted one is refused first."""
        check_not_deleted(self.ctx.tracking_uri, self.spec.study)
        self._lease, previous = Lease.take(self.ctx.tracking_uri, self.spec.study, self.ctx.say)
        fence_writes(self._lease.fence)
        self.ctx.lease = self._lease
        self.ctx.stamp = f"{self.ctx.stamp}-lease{self._lease.epoch}"
        if previous is not None and self.ctx.resume:
            self.ctx.say(f"taking over study {self.spec.study!r} from driver {previous}, which is gone")

    def _check_study(self) -> None:
        check_not_deleted(self.ctx.tracking_uri, self.spec.study)
        recorded = search(self.ctx.tracking_uri, self.spec.study)
        if (recorded or self.ctx.storage.exists(self.spec.study)) and not self.ctx.resume:
            raise RuntimeError(
                f"study {self.spec.study!r} already has {len(recorded)} MLflow run(s) in {self.ctx.tracking_uri} "
                f"and/or results in {self.ctx.storage.display(self.spec.study)}; pass --resume to continue it, "
                "or choose a new study name"
            )

    def _check_cluster(self) -> None:
        # A data directory absent on the driver passed the data check, so no dataset of the sweep reads files.
        data_dir = self.ctx.data_dir if Path(self.ctx.data_dir).exists() else None
        nodes = check_cluster(self.ctx.tracking_uri, self.ctx.storage.uri, data_dir, single_node=self.single_node)
        if nodes > 1 and not self.single_node:
            self.ctx.say(f"cluster of {nodes} nodes: tracking store, storage and data reachable from every node")

    def _study_params(self) -> dict[str, Any]:
        spec = self.spec
        params = {"protocol": spec.protocol, "evaluate.seeds": json.dumps(list(spec.evaluate.seeds)),
                  "tune.sampler": spec.tune.sampler, "tune.num_samples": spec.tune.num_samples,
                  "tune.scheduler": spec.tune.scheduler, "tune.metric": spec.tune.metric,
                  "models": json.dumps(list(spec.models)), "datasets": json.dumps(list(spec.datasets)),
                  "regularizers": json.dumps(list(spec.regularizers))}
        if spec.protocol == "paper":
            params.update({"base.sampler": spec.base.sampler, "base.num_samples": spec.base.num_samples,
                           "base.scheduler": spec.base.scheduler, "base.epochs": spec.base_epochs,
                           "base.scope": spec.base_scope})
        return params

    def _write_log(self) -> str:
        """This driver's Ray output, secrets redacted, in an owner-only file under the storage path."""
        return self.ctx.ray.save_log(self.ctx.storage, self.spec.study, f"ray-{self.ctx.stamp}.log")

    def run(self) -> SweepOutcome:
        """Take the study's lease, preflight, start Ray, run the search stages of the protocol, evaluate every
        cell over the seeds; the lease is released at the end, whatever ended the sweep."""
        self._check_data()
        if self.address and not self.single_node:
            refuse_sqlite(self.ctx.tracking_uri)
        self._take_lease()
        try:
            return self._run_leased()
        except LeaseLostError:
            self.ctx.ray.stop()
            # A deleted experiment takes its lease run with it: say what was deleted (exit 2), not a lost lease.
            check_not_deleted(self.ctx.tracking_uri, self.spec.study)
            raise
        finally:
            fence_writes(None)
            if self._lease is not None:
                self._lease.release()

    def _run_leased(self) -> SweepOutcome:
        if self.address:
            # A running cluster is joined first, so that a tracking store or storage its other nodes cannot
            # share is refused before any run is written to it.
            resources = self.ctx.ray.start()
            self._check_cluster()
            self._check_study()
            check_storage_writable(self.ctx.storage)
            check_resources(self.spec, self.ctx.ray.node_resources())
        else:
            self._check_study()
            check_storage_writable(self.ctx.storage)
            check_resources(self.spec, [{"CPU": local_cpus(), "GPU": local_gpus()}])
            gpu_request(self.spec.resources.gpu, local_gpus(), joined=False)
            resources = self.ctx.ray.start()
        try:
            return self._run_stages(resources)
        except KeyboardInterrupt as stop:
            self._stop(stop)
            raise
        except Exception as exc:
            if (deleted := deleted_error(exc, self.ctx.tracking_uri, self.spec.study)) is not None:
                raise deleted from exc
            if not is_disk_full(exc):
                raise
            uri = self.ctx.tracking_uri
            error = disk_full(exc, self.ctx.storage.display(), str(sqlite_path(uri) or uri))
            closed = 0
            # Best effort, since the store may be what is full; the runs are the infrastructure's, not the methods'.
            with contextlib.suppress(Exception):
                closed = mark_interrupted(uri, self.spec.study, str(error))
            self.ctx.say(f"{error}; {closed} open run(s) closed as interrupted (--resume continues them)")
            raise error from exc

    def _stop(self, stop: KeyboardInterrupt) -> None:
        """A clean stop: no further stage starts, Ray ends its trials (their checkpoints stay), and every run
        still open is closed as ``interrupted``. A second Ctrl-C cuts this short; ``--resume`` then closes
        what is left open as its first step."""
        what, _ = describe(stop)
        self.ctx.say(f"{what}: stopping; trials keep their last checkpoint")
        self.ctx.ray.stop()
        closed = mark_interrupted(self.ctx.tracking_uri, self.spec.study, f"stopped by {what}")
        self.ctx.say(f"{closed} open run(s) closed as interrupted")

    def _run_stages(self, resources: dict[str, float]) -> SweepOutcome:
        ensure_experiment(self.ctx.tracking_uri, self.spec.study)
        if self.ctx.resume:
            close_runs_of_a_lost_driver(self.ctx)
        source = Path(self.spec.source).read_text() if self.spec.source else None
        if source is not None and self.spec.overrides:
            source += "".join(f"# --set {item}\n" for item in self.spec.overrides)
        self.ctx.study_run_id = study_run(self.ctx.tracking_uri, self.spec.study,
                                          description=self.spec.description, params=self._study_params(),
                                          yaml_text=source, tags=driver_provenance() | {"host": socket.gethostname()})
        seal_plan(self.ctx.tracking_uri, self.spec.study, self.ctx.study_run_id)  # a resume may plan other seeds
        self.ctx.place(resources.get("GPU", 0.0))
        self.ctx.failed = {}
        base: dict[str, dict[str, Any]] = {}
        if self.spec.protocol == "paper":
            base = search_stage(self.ctx, base_stage(self.spec))
        stage = tune_stage(self.spec, base)
        tuned = search_stage(self.ctx, stage_for_cells(stage, {c.key for c in stage.cells
                                                           if base_key(self.spec, c.cell) not in self.ctx.failed}))
        cells = sweep_cells(self.spec)
        self.ctx.evaluated = self.ctx.final_configs(cells, base, tuned)
        evaluated, skipped = evaluate(self.ctx, cells, self.ctx.evaluated)
        failed = {c.label: self.ctx.failed[c.key] for c in cells if c.key in self.ctx.failed}
        finish_cell(self.ctx.tracking_uri, self.ctx.study_run_id, "failed" if failed else "done",
                    error=f"{len(failed)} cell(s) failed" if failed else None)
        log_file, infrastructure = None, None
        try:
            log_file = self._write_log()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            infrastructure = str(disk_full(exc, self.ctx.storage.display(self.spec.study)))
            self.ctx.say(f"Ray's log not written: {infrastructure}")
        if self.ctx.infrastructure:
            cut_off = (f"{len(self.ctx.infrastructure)} trial(s) stopped by an infrastructure failure after their "
                       f"retries (--resume continues them): {self.ctx.infrastructure[0]}")
            infrastructure = "; ".join(filter(None, [cut_off, infrastructure]))
        return SweepOutcome(self.spec.study, self.ctx.evaluated, evaluated, skipped, len(failed), failed, log_file,
                            infrastructure)
