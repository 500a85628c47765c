"""The sweep driver: the stages of :mod:`ndebench.platform.spec.plan`, each one Ray Tune run over all its cells.

Search stages (``base``, ``tune``) run every cell's trials in one ``Tuner`` through
:class:`~ndebench.platform.engine.searcher.CellSearcher` (one seeded Optuna study per cell), optionally with ASHA
per cell. ``evaluate`` runs the chosen config of every cell for every seed in one grid. MLflow: a study run,
one run per (cell, stage) under it, every trial run under its cell run. A cell whose search or evaluation
yields no usable trial is recorded as failed and the sweep goes on; ``resume`` reruns failed and unfinished
search cells, reading every finished cell's chosen config back from MLflow, and every planned evaluate
(cell, seed) without a current ``ok`` run (:func:`rerun_reason`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ndebench.datasets.check import preflight_problems
from ndebench.datasets.files import resolve_data_dir
from ndebench.datasets.registry import dataset_info
from ndebench.platform.diskfull import disk_full, is_disk_full
from ndebench.platform.engine.cluster import check_cluster, shared_folder
from ndebench.platform.engine.joining import gpu_request, init_arguments, ray_address
from ndebench.platform.engine.provenance import driver_provenance
from ndebench.platform.engine.runchecks import check_resources, check_storage_writable, local_cpus, local_gpus
from ndebench.platform.engine.storage import Storage
from ndebench.platform.engine.trainable import trainable
from ndebench.platform.record.completeness import attempts, current, mark_superseded
from ndebench.platform.record.tracking import (
    FINISHED_STATUSES,
    SUPERSEDED,
    TAG,
    cell_run,
    cell_states,
    client,
    close_orphaned_runs,
    close_running_runs,
    ensure_experiment,
    evaluate_runs,
    finish_cell,
    run_status,
    search,
    sqlite_path,
    study_run,
)
from ndebench.platform.spec.config import Space, SweepSpec, config_hash
from ndebench.platform.spec.plan import Cell, Stage, base_stage, cell_template, stage_for_cells, sweep_cells, tune_stage

Printer = Callable[[str], None]
LISTED = 12
# Provenance tags that identify the code: a diverged run of other code is rerun on --resume.
CODE_TAGS = ("version", "git_commit", "git_dirty")
TOKEN_WARNING = "Token authentication is enabled for this Ray cluster"


def _print(message: str) -> None:
    print(f"[ndebench] {message}", flush=True)


def decode(space: Space, text: str) -> Any:
    """A chosen value read back from an MLflow param (a string) as the type its search space gives."""
    if space.kind == "choice":
        return next(v for v in space.args if str(v) == text)
    return int(text) if space.kind == "randint" else float(text)


def rerun_reason(runs: list[Any], config_hash: str, code: dict[str, str], retry_diverged: bool) -> str | None:
    """Why a planned (cell, seed) with these earlier ``runs`` (oldest first) is run again, or ``None`` when its
    current run stands: ``ok`` with the same config, or ``diverged`` with the same config and ``code`` (the
    driver's :data:`CODE_TAGS`) unless ``retry_diverged``."""
    if not runs:
        return "no run yet"
    run = current(runs)
    status, tags = run_status(run), run.data.tags
    if tags.get(f"{TAG}config_hash") != config_hash:
        return f"config changed since its {status} run"
    if status == "running":
        return "cut off (continues its run from its last checkpoint)"
    if status == "ok":
        return None
    if status != "diverged":
        return f"its last run ended {status}"
    if any(tags.get(f"{TAG}{k}") != v for k, v in code.items()):
        return "diverged under other code"
    return "diverged, --retry-diverged" if retry_diverged else None


def _search_rerun_reason(state: Any) -> str:
    """Why ``--resume`` searches a cell again: its cell run's state (``None``: the cell never started)."""
    if state is None:
        return "not started"
    status = state.data.tags.get(f"{TAG}status")
    if status == "failed":
        return f"failed: {state.data.tags.get(f'{TAG}error', '')[:200]}"
    return "unfinished (its driver was lost)"


def _trial_dirname(trial: Any) -> str:
    """A trial's folder under the storage path: its id, as Ray's logs and errors name it. Ray's default adds up to
    130 characters of the config and a timestamp, unreadable with our flat ``section.key`` configs."""
    return trial.trial_id


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
        single_node: bool = False,
    ):
        self.spec, self.tracking_uri, self.resume = spec, tracking_uri, resume
        self.address, self.single_node = ray_address(address), single_node
        self.storage = Storage(storage_path)
        # Resolved on the driver (flag > config > $NDEBENCH_DATA_DIR > ./data) and made absolute, since
        # Ray trials run in their own working directories, possibly on other nodes.
        self.data_dir = str(resolve_data_dir(data_dir or spec.data_dir).resolve())
        self.say, self.verbose, self.progress_every_s = printer, verbose, progress_every_s
        self.retry_diverged = retry_diverged
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.failed: dict[str, str] = {}

    def preflight(self) -> None:
        """Before Ray starts: every dataset's files are present, and a study with recorded runs continues
        only with ``resume`` (nothing is overwritten)."""
        self._check_data()
        self._check_study()

    def _check_data(self) -> None:
        missing = [problem for d in self.spec.datasets for problem in preflight_problems(d, self.data_dir)]
        if missing:
            raise FileNotFoundError("\n".join(missing))

    def _check_study(self) -> None:
        recorded = search(self.tracking_uri, self.spec.study)
        if (recorded or self.storage.exists(self.spec.study)) and not self.resume:
            raise RuntimeError(
                f"study {self.spec.study!r} already has {len(recorded)} MLflow run(s) in {self.tracking_uri} "
                f"and/or results in {self.storage.display(self.spec.study)}; pass --resume to continue it, "
                "or choose a new study name"
            )

    def _check_cluster(self) -> None:
        # A data directory absent on the driver passed the data check, so no dataset of the sweep reads files.
        data_dir = self.data_dir if Path(self.data_dir).exists() else None
        nodes = check_cluster(self.tracking_uri, self.storage.uri, data_dir, single_node=self.single_node)
        if nodes > 1 and not self.single_node:
            self.say(f"cluster of {nodes} nodes: tracking store, storage and data reachable from every node")

    @staticmethod
    def _node_resources() -> list[dict[str, float]]:
        import ray

        return [node["Resources"] for node in ray.nodes() if node.get("Alive")]

    def _start_ray(self) -> dict[str, float]:
        import ray

        logging.getLogger("ray._private.authentication.authentication_token_setup").addFilter(
            lambda record: TOKEN_WARNING not in record.getMessage())
        self._console = sys.stdout
        self._driver_log = Path(tempfile.mkdtemp(prefix="ndebench-")) / "driver.log"
        self._console_log = self._driver_log.with_name("console.log")
        self._driver_handler = logging.FileHandler(self._driver_log)
        self._driver_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("ray").addHandler(self._driver_handler)
        if not ray.is_initialized():
            ray.init(**init_arguments(self.address, self.verbose))
        resources = ray.cluster_resources()
        self.say(f"Ray cluster: {resources.get('CPU', 0):g} CPU, {resources.get('GPU', 0):g} GPU")
        return resources

    def _place(self, gpus_available: float) -> None:
        """GPU requests are kept (a joined cluster may add GPU nodes) or refused; never dropped silently."""
        self._gpu, message = gpu_request(self.spec.resources.gpu, gpus_available, bool(self.address))
        if message:
            self.say(message)
        self._device = "cuda" if self._gpu > 0 else "cpu"

    def _resolve(self, config: dict[str, Any]) -> dict[str, Any]:
        config = dict(config, data_dir=self.data_dir, device=self._device)
        # torch defaults to one thread per core of the node, so concurrent trials would oversubscribe it; a
        # trial uses the CPUs Ray reserved for it.
        config.setdefault("training.threads", max(1, int(self.spec.resources.cpu)))
        return config

    def _trainable(self, stage: str, parents: dict[str, str],
                   evaluate_configs: dict[str, dict[str, Any]] | None = None) -> Any:
        from ray import tune

        fn = tune.with_parameters(
            trainable, tracking_uri=self.tracking_uri, parents=parents, evaluate_configs=evaluate_configs,
            storage_uri=self.storage.uri, experiment=self._experiment(stage), run_tags=driver_provenance(),
            checkpoint_every=self.spec.tune.checkpoint_every, save_weights=self.spec.evaluate.save_weights,
            plugins=self.spec.plugins, node_check=self._node_check(),
            system_metrics=self.spec.resources.system_metrics,
        )
        return tune.with_resources(fn, {"cpu": self.spec.resources.cpu, "gpu": self._gpu})

    def _node_check(self) -> tuple[str | None, str | None] | None:
        """What a trial checks on its node before it starts: on a joined cluster, nodes may join after the
        preflight."""
        if not self.address or self.single_node:
            return None
        return shared_folder(self.storage.uri), self.data_dir if Path(self.data_dir).exists() else None

    def _experiment(self, stage: str) -> str:
        return f"{self.spec.study}/{stage}-{self.stamp}"

    def _fit(self, stage: str, fn: Any, tune_config: Any, param_space: dict[str, Any], callbacks: list[Any]) -> Any:
        """One Ray Tune run; Ray's console output goes to the sweep's log file unless ``verbose``."""
        from ray import tune

        run_config = tune.RunConfig(
            name=self._experiment(stage), storage_path=self.storage.root,
            storage_filesystem=self.storage.fs, verbose=2 if self.verbose else 0, callbacks=callbacks,
            failure_config=tune.FailureConfig(max_failures=self.spec.tune.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        )
        tuner = tune.Tuner(fn, param_space=param_space, tune_config=tune_config, run_config=run_config)
        # Ray Tune's own SIGINT handler would end only this stage and let the sweep go on: Ctrl-C raises
        # KeyboardInterrupt instead, so the whole command stops (`ndebench run` exits 130).
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
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
                for handler, level in zip(consoles, levels):
                    handler.setLevel(level)

    def _say_console(self, message: str) -> None:
        """Progress lines reach the console even while Ray's own output is redirected to the log."""
        with contextlib.redirect_stdout(self._console):
            self.say(message)

    def _cell_tags(self, cell: Cell) -> dict[str, str]:
        """Identity, the dataset's primary metric and the driver's provenance (a cell run is written by the driver)."""
        tags = {"model": cell.model, "dataset": cell.dataset, "regularizer": cell.regularizer,
                "metric": dataset_info(cell.dataset).metric}
        tags |= driver_provenance() | {"host": socket.gethostname()}
        return tags | ({"variant": cell.variant} if cell.variant else {})

    def _search_stage(self, stage: Stage) -> dict[str, dict[str, Any]]:
        """Run one search stage over its cells with something to search; return the chosen values per cell
        (searched keys only). Failed cells go to ``self.failed``; finished ones are read from MLflow."""
        from ndebench.platform.engine.progress import MarkStopped, StageProgress
        from ndebench.platform.engine.searcher import CellSearcher, PerCellASHA
        from ray import tune

        chosen = {c.key: {} for c in stage.cells if c.budget == 0}
        states = cell_states(self.tracking_uri, self.spec.study, stage.name) if self.resume else {}
        todo = set()
        for cell in stage.cells:
            state = states.get(cell.key)
            if cell.budget and state is not None and state.data.tags.get(f"{TAG}status") == "done":
                chosen[cell.key] = {k: decode(v, state.data.params[k]) for k, v in cell.space.items()}
            elif cell.budget:
                todo.add(cell.key)
        run = stage_for_cells(stage, todo)
        if not run.cells:
            if todo or any(c.budget for c in stage.cells):
                self.say(f"stage {stage.name}: every cell already done, chosen configs read from MLflow")
            return chosen
        tc = stage.tune
        sampler = {"tpe": f"Optuna TPE ({tc.n_startup_trials} random start-up trials)", "random": "random search",
                   "grid": "the full grid"}[tc.sampler]
        self.say(f"stage {stage.name}: {run.trials} trial(s) over {len(run.cells)} cell(s), {sampler}, "
                 f"{tc.metric} {tc.mode}" + (", ASHA early stopping" if tc.scheduler == "asha" else ""))
        if self.resume:
            reasons = {(c.label, ""): _search_rerun_reason(states.get(c.key)) for c in run.cells}
            self._say_reruns(reasons, 0)
        parents = {c.key: cell_run(self.tracking_uri, self.spec.study, self.study_run_id, stage.name, c.key,
                                   self._cell_tags(c.cell)) for c in run.cells}
        resolved = [type(c)(c.cell, self._resolve(c.template), c.space, c.budget) for c in run.cells]
        searcher = CellSearcher(stage.name, resolved, tc)
        scheduler = None
        if tc.scheduler == "asha":
            scheduler = PerCellASHA(tc.metric, tc.mode, tc.asha,
                                    {c.key: c.template["training.epochs"] for c in run.cells})
        progress = StageProgress(stage.name, {c.key: c.budget for c in run.cells}, {c.key: c.label for c in run.cells},
                                 tc.metric, tc.mode, self._say_console, self.progress_every_s)
        self._fit(stage.name, self._trainable(stage.name, parents), tune.TuneConfig(
            search_alg=searcher, scheduler=scheduler, num_samples=searcher.total, reuse_actors=True,
            # Also Ray's bound on pending trials (1 for a custom searcher without it): the cluster stays full.
            max_concurrent_trials=searcher.max_live, trial_dirname_creator=_trial_dirname,
        ), {}, [progress, MarkStopped(self.tracking_uri)])
        self._close_orphans(stage.name, progress.outcomes)
        for cell in run.cells:
            outcomes = progress.outcomes[cell.key]
            ok = [o for o in outcomes if self._usable(o["result"], tc.metric)]
            if not ok:
                self._fail(cell.key, cell.label, parents[cell.key], stage.name, outcomes)
                continue
            pick = min if tc.mode == "min" else max
            best = pick(ok, key=lambda o: o["result"][tc.metric])
            chosen[cell.key] = {k: best["config"][k] for k in cell.space}
            finish_cell(self.tracking_uri, parents[cell.key], "done", params=chosen[cell.key], metrics={
                f"best_{tc.metric}": best["result"][tc.metric], "n_trials": len(outcomes), "n_ok": len(ok)})
        return chosen

    def _close_orphans(self, phase: str, outcomes: dict[str, list[dict[str, Any]]],
                       trials: dict[str, dict[str, Any]] | None = None) -> None:
        """Close as ``error`` the trial runs of ``phase`` whose worker died before recording an outcome, with
        the reason Ray gave for that trial."""
        reasons = {}
        for outcome in (o for group in outcomes.values() for o in group if o["error"]):
            config = outcome["config"]
            reasons[config_hash(trials[config["trial"]] if trials and "trial" in config else config)] = outcome["error"]
        closed = close_orphaned_runs(self.tracking_uri, self.spec.study, phase, reasons, tags={"kind": "trial"})
        if closed:
            self.say(f"stage {phase}: {len(closed)} trial(s) lost their worker; their MLflow runs are closed as error "
                     "with Ray's reason (`ndebench report` lists them)")

    @staticmethod
    def _usable(result: dict[str, Any], metric: str) -> bool:
        value = result.get(metric)
        return result.get("status") == "ok" and value is not None and math.isfinite(value)

    def _fail(self, key: str, label: str, run_id: str, stage: str, outcomes: list[dict[str, Any]]) -> None:
        """Record a cell with no usable trial: the first error message, on its cell run and in the outcome."""
        messages = [o["error"] or o["result"].get("message", "") for o in outcomes]
        statuses = sorted({o["result"].get("status", "error") for o in outcomes})
        first = next((m for m in messages if m),
                     f"no trial finished ok (statuses: {', '.join(statuses) or 'none ran'})")
        message = f"{stage}: {first}"
        self.failed[key] = message
        finish_cell(self.tracking_uri, run_id, "failed", error=message)
        self.say(f"  FAILED {label}: {message}")

    def _final_configs(self, cells: list[Cell], base: dict[str, dict[str, Any]],
                       tuned: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The evaluated config of every cell: its template, the base stage's values (paper), its own search."""
        out = {}
        for cell in cells:
            pair_key = Cell(cell.model, cell.dataset, "none").key
            if cell.key in self.failed:
                continue
            if self.spec.protocol == "paper" and pair_key in self.failed:
                self.failed[cell.key] = f"base stage of {cell.model} x {cell.dataset} failed: {self.failed[pair_key]}"
                continue
            config = cell_template(self.spec, cell)
            if self.spec.protocol == "paper":
                config.update(base.get(pair_key, {}))
            config.update(tuned.get(cell.key, {}))
            out[cell.key] = self._resolve(config)
        return out

    def _evaluate(self, cells: list[Cell], configs: dict[str, dict[str, Any]]) -> tuple[int, int]:
        """Every planned (cell, seed) without a current ``ok`` run in one grid, then per-cell aggregates in MLflow."""
        from ndebench.platform.engine.progress import StageProgress
        from ray import tune

        if self.resume:
            self._refuse_unsafe_trial_dirs()
        found = attempts(self.tracking_uri, self.spec.study) if self.resume else {}
        code = {k: v for k, v in driver_provenance().items() if k in CODE_TAGS}
        trials, reasons, skipped, kept = {}, {}, 0, 0
        for seed in self.spec.evaluate.seeds:  # seed-major, so that different cells share the cluster
            for cell in cells:
                if cell.key not in configs:
                    continue
                config = dict(configs[cell.key], phase="evaluate", seed=seed)
                runs = found.get((cell.key, seed), [])
                why = rerun_reason(runs, config_hash(config), code, self.retry_diverged)
                if why is None:
                    skipped += 1
                    kept += run_status(current(runs)) == "diverged"
                else:
                    trials[f"{cell.key}#{seed}"] = config
                    reasons[(cell.label, seed)] = why
        states = cell_states(self.tracking_uri, self.spec.study, "evaluate") if self.resume else {}
        by_key = {c.key: c for c in cells}
        rerun_cells = {t.split("#")[0] for t in trials}
        parents = {}
        for cell in cells:
            state = states.get(cell.key)
            done = state is not None and state.data.tags.get(f"{TAG}status") == "done"
            if done and cell.key not in rerun_cells and cell.key not in self.failed:
                continue
            run_id = cell_run(self.tracking_uri, self.spec.study, self.study_run_id, "evaluate", cell.key,
                              self._cell_tags(cell))
            if cell.key in self.failed:
                finish_cell(self.tracking_uri, run_id, "failed", error=self.failed[cell.key])
            else:
                parents[cell.key] = run_id
        self.say(f"stage evaluate: {len(trials)} trial(s) over {len(rerun_cells)} cell(s), seeds "
                 f"{list(self.spec.evaluate.seeds)}" + (f", {skipped} already recorded" if skipped else ""))
        if self.resume:
            self._say_reruns(reasons, kept)
        outcomes: dict[str, list[dict[str, Any]]] = {k: [] for k in parents}
        if trials:
            budgets = {k: sum(t.startswith(f"{k}#") for t in trials) for k in parents}
            progress = StageProgress("evaluate", budgets, {k: by_key[k].label for k in parents}, None, "min",
                                     self._say_console, self.progress_every_s)
            self._fit("evaluate", self._trainable("evaluate", parents, trials), tune.TuneConfig(
                reuse_actors=True, trial_dirname_creator=_trial_dirname),
                {"trial": tune.grid_search(list(trials))}, [progress])
            self._close_orphans("evaluate", progress.outcomes, trials)
            outcomes.update(progress.outcomes)
            superseded = mark_superseded(self.tracking_uri, self.spec.study)
            if superseded:
                self.say(f"stage evaluate: {superseded} earlier attempt(s) marked superseded (tag {SUPERSEDED}); "
                         "reports count the newest finished run of each (cell, seed)")
            for outcome in (o for group in outcomes.values() for o in group if o["result"].get("resume_note")):
                self.say(f"stage evaluate: run {outcome['result'].get('run_id')}: {outcome['result']['resume_note']}")
        self._aggregate(parents, by_key, outcomes)
        return len(trials), skipped

    def _say_reruns(self, reasons: dict[tuple[str, int | str], str], kept: int) -> None:
        """What ``--resume`` reruns and why (per cell and seed, or per cell of a search stage), and how many
        diverged runs it keeps."""
        for (label, seed), why in list(reasons.items())[:LISTED]:
            self.say(f"  rerun {label}{'' if seed == '' else f' seed {seed}'}: {why}")
        if len(reasons) > LISTED:
            self.say(f"  ... and {len(reasons) - LISTED} more")
        if kept:
            self.say(f"  {kept} diverged run(s) kept as results (same config and code); --retry-diverged reruns them")

    def _close_runs_of_a_lost_driver(self) -> None:
        """Search trials an earlier driver left running: their cells restart, so the runs are closed as what
        happened (evaluate runs stay: their trials continue them)."""
        cause = ("driver lost: left running by an earlier `ndebench run` of this study that died or was "
                 "interrupted; its cell restarts on --resume")
        for phase in ("base", "tune"):
            closed = close_orphaned_runs(self.tracking_uri, self.spec.study, phase, tags={"kind": "trial"},
                                         cause=cause)
            if closed:
                self.say(f"stage {phase}: {len(closed)} run(s) of an earlier driver that was lost closed as error")

    def _refuse_unsafe_trial_dirs(self) -> None:
        """Unfinished evaluate runs whose ``ndebench.trial_dir`` tag leaves the storage root: say so and drop the
        tag, so that their trials start from scratch instead of reading whatever the tag names."""
        from ndebench.platform.engine.safepaths import UnsafePathError, trial_folder

        for run in search(self.tracking_uri, self.spec.study,
                          f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'"):
            trial_dir = run.data.tags.get(f"{TAG}trial_dir")
            if not trial_dir or run.data.tags.get(f"{TAG}status") in FINISHED_STATUSES:
                continue
            try:
                trial_folder(self.storage, self.spec.study, trial_dir)
            except UnsafePathError as exc:
                self.say(f"stage evaluate: run {run.info.run_id}: checkpoint path refused: {exc}; its trial starts "
                         "from scratch")
                client(self.tracking_uri).delete_tag(run.info.run_id, f"{TAG}trial_dir")

    def _aggregate(self, parents: dict[str, str], cells: dict[str, Cell],
                   outcomes: dict[str, list[dict[str, Any]]]) -> None:
        """Cell-run metrics ``mean_<m>``, ``std_<m>``, ``n`` and ``p_value_vs_none`` (primary metric)."""
        import pandas as pd
        from ndebench.platform.report.report import primary_metrics
        from ndebench.platform.report.stats import compare_to_baseline, summarize_cells

        runs = evaluate_runs(self.tracking_uri, self.spec.study, with_calibration=False, variants=True)
        if runs.empty:
            runs = runs.reindex(columns=["model", "dataset", "regularizer", "variant", "status", "seed"])
        runs = runs.assign(regularizer=[v or r for v, r in zip(runs["variant"], runs["regularizer"])])
        metrics = [c for c in runs.columns if c.startswith("test_") and pd.api.types.is_numeric_dtype(runs[c])]
        primary = primary_metrics(runs) if len(runs) else {}
        for key, run_id in parents.items():
            cell = cells[key]
            name = cell.variant or cell.regularizer
            mine = runs[(runs.model == cell.model) & (runs.dataset == cell.dataset) & (runs.regularizer == name)
                        & runs.status.isin(["ok", "diverged", "error"])]
            if not (mine["status"] == "ok").any():
                self._fail(key, cell.label, run_id, "evaluate", outcomes.get(key, []))
                continue
            values: dict[str, float] = {"n": float((mine["status"] == "ok").sum())}
            for metric in metrics:
                row = summarize_cells(mine, metric).iloc[0]
                if row["n"]:
                    values[f"mean_{metric}"], values[f"std_{metric}"] = row["mean"], row["std"]
            metric = primary.get(cell.dataset)
            if name != "none" and metric:
                pair = runs[(runs.model == cell.model) & (runs.dataset == cell.dataset)
                            & runs.regularizer.isin([name, "none"])]
                tests = compare_to_baseline(pair, metric, test=self.spec.report.test)
                if len(tests):
                    values["p_value_vs_none"] = float(tests["p"].iloc[0])
            params = {k: v for k, v in sorted(self._evaluated[key].items()) if k not in ("data_dir", "device")}
            finish_cell(self.tracking_uri, run_id, "done", params=params,
                        metrics={k: v for k, v in values.items() if v is not None and math.isfinite(v)})

    def _study_params(self) -> dict[str, Any]:
        spec = self.spec
        params = {"protocol": spec.protocol, "evaluate.seeds": json.dumps(list(spec.evaluate.seeds)),
                  "tune.sampler": spec.tune.sampler, "tune.num_samples": spec.tune.num_samples,
                  "tune.scheduler": spec.tune.scheduler, "tune.metric": spec.tune.metric,
                  "models": json.dumps(list(spec.models)), "datasets": json.dumps(list(spec.datasets)),
                  "regularizers": json.dumps(list(spec.regularizers))}
        if spec.protocol == "paper":
            params.update({"base.sampler": spec.base.sampler, "base.num_samples": spec.base.num_samples,
                           "base.scheduler": spec.base.scheduler, "base.epochs": spec.base_epochs})
        return params

    def _write_log(self) -> str:
        """Ray's full output of this sweep (driver log and the workers' logs) in a file under the storage path."""
        import ray

        logging.getLogger("ray").removeHandler(self._driver_handler)
        self._driver_handler.close()
        node = getattr(ray._private.worker, "_global_node", None)
        paths = [self._driver_log, self._console_log] + (sorted(Path(node.get_logs_dir_path()).glob("*"))
                                                         if node is not None else [])
        chunks = []
        for path in paths:
            if path.exists() and path.suffix in (".out", ".err", ".log") and path.stat().st_size:
                chunks.append(f"===== {path.name} =====\n{path.read_text(errors='replace')}")
        return self.storage.write_bytes("\n".join(chunks).encode(), self.spec.study, f"ray-{self.stamp}.log")

    def run(self) -> SweepOutcome:
        """Preflight, start Ray, run the search stages of the protocol, evaluate every cell over the seeds."""
        self._check_data()
        if self.address:
            # A running cluster is joined first, so that a tracking store or storage its other nodes cannot
            # share is refused before anything is written to it.
            resources = self._start_ray()
            self._check_cluster()
            self._check_study()
            check_storage_writable(self.storage)
            check_resources(self.spec, self._node_resources())
        else:
            self._check_study()
            check_storage_writable(self.storage)
            check_resources(self.spec, [{"CPU": local_cpus(), "GPU": local_gpus()}])
            gpu_request(self.spec.resources.gpu, local_gpus(), joined=False)
            resources = self._start_ray()
        try:
            return self._run_stages(resources)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            error = disk_full(exc, self.storage.display(), str(sqlite_path(self.tracking_uri) or self.tracking_uri))
            closed = close_running_runs(self.tracking_uri, self.spec.study, str(error))
            self.say(f"{error}; {closed} open run(s) closed as error/failed")
            raise error from exc

    def _run_stages(self, resources: dict[str, float]) -> SweepOutcome:
        ensure_experiment(self.tracking_uri, self.spec.study)
        source = Path(self.spec.source).read_text() if self.spec.source else None
        if source is not None and self.spec.overrides:
            source += "".join(f"# --set {item}\n" for item in self.spec.overrides)
        self.study_run_id = study_run(self.tracking_uri, self.spec.study, description=self.spec.description,
                                      params=self._study_params(), yaml_text=source,
                                      tags=driver_provenance() | {"host": socket.gethostname()})
        self._place(resources.get("GPU", 0.0))
        self.failed = {}
        if self.resume:
            self._close_runs_of_a_lost_driver()
        base: dict[str, dict[str, Any]] = {}
        if self.spec.protocol == "paper":
            base = self._search_stage(base_stage(self.spec))
        frozen = {(c.model, c.dataset): base[c.key] for c in (Cell(m, d, "none") for m in self.spec.models
                                                            for d in self.spec.datasets) if c.key in base}
        stage = tune_stage(self.spec, frozen)
        failed_pairs = {c.cell.pair for c in stage.cells if Cell(*c.cell.pair, "none").key in self.failed}
        tuned = self._search_stage(stage_for_cells(stage, {c.key for c in stage.cells
                                                           if c.cell.pair not in failed_pairs}))
        cells = sweep_cells(self.spec)
        self._evaluated = self._final_configs(cells, base, tuned)
        evaluated, skipped = self._evaluate(cells, self._evaluated)
        failed = {c.label: self.failed[c.key] for c in cells if c.key in self.failed}
        finish_cell(self.tracking_uri, self.study_run_id, "failed" if failed else "done",
                    error=f"{len(failed)} cell(s) failed" if failed else None)
        log_file, infrastructure = None, None
        try:
            log_file = self._write_log()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            infrastructure = str(disk_full(exc, self.storage.display(self.spec.study)))
            self.say(f"Ray's log not written: {infrastructure}")
        return SweepOutcome(self.spec.study, self._evaluated, evaluated, skipped, len(failed), failed, log_file,
                            infrastructure)
