"""The sweep driver: per cell a seeded Optuna search on validation data, then the best config over seeds.

Phase ``tune`` runs a Ray Tune ``Tuner`` with ``OptunaSearch`` (a seeded ``TPESampler``) over a cell's
searched hyperparameters at seed 0, minimising (or maximising) a validation metric. Phase ``evaluate`` runs
the best config of every cell for every evaluation seed in one grid, reporting test metrics. Every trial is
one MLflow run. ``resume`` skips what is already recorded: a cell whose best config is stored, and evaluate
runs whose config hash finished.
"""
from __future__ import annotations

import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ndebench.datasets.check import dataset_status
from ndebench.datasets.files import resolve_data_dir
from ndebench.platform.config import Space, SweepSpec, config_hash, searched_keys
from ndebench.platform.tracking import TrialRecorder, ensure_experiment, finished_hashes, search
from ndebench.platform.trial import TrialSpec, run_trial

Printer = Callable[[str], None]


def _print(message: str) -> None:
    print(f"[ndebench] {message}", flush=True)


def cell_slug(model: str, dataset: str, regularizer: str) -> str:
    return f"{model}__{dataset.replace('/', '-')}__{regularizer}"


def trial_tags(config: dict[str, Any], phase: str) -> dict[str, str]:
    return {
        "study": config["study"], "phase": phase, "model": config["model"], "dataset": config["dataset"],
        "regularizer": config["regularizer"], "seed": str(config.get("seed", 0)),
    }


def trainable(config: dict[str, Any], *, tracking_uri: str, evaluate_configs: dict[str, dict[str, Any]] | None = None) -> None:
    """Ray Tune function trainable: one trial, one MLflow run, per-epoch ``tune.report``.

    Tune-phase trials get their flat config from the searcher; evaluate-phase trials get a short key
    ``<cell>#<seed>`` (which keeps Ray's progress tables readable) into ``evaluate_configs``.
    """
    from ray import tune

    config = dict(evaluate_configs[config["trial"]] if "trial" in config else config)
    phase = config["phase"]
    digest = config_hash(config)
    recorder = TrialRecorder(tracking_uri, config["study"], config, digest, trial_tags(config, phase))
    epoch = 0

    def on_epoch(record: dict[str, float]) -> None:
        nonlocal epoch
        epoch += 1
        recorder.log_metrics(record, step=epoch)
        tune.report(dict(record, status="running"))

    try:
        result = run_trial(TrialSpec.from_flat(config), on_epoch=on_epoch, evaluate_test=phase == "evaluate")
    except Exception as exc:
        recorder.finish("error", {}, {"error": f"{type(exc).__name__}: {exc}"[:4000]}, {})
        raise
    protocol = result.protocol["test_protocol"]
    tags = {"test_protocol": protocol, "epochs": result.epochs, "best_epoch": result.best_epoch}
    if result.message:
        tags["message"] = result.message
    final = {**result.val, **result.test} if result.status == "ok" else {}
    artifacts = {"calibration.json": result.calibration} if result.calibration else {}
    recorder.finish(result.status, final, tags, artifacts)
    val_loss = result.val.get("val_loss", float("inf")) if result.status == "ok" else float("inf")
    tune.report({**final, "val_loss": val_loss, "status": result.status})


@dataclass
class SweepOutcome:
    study: str
    best_configs: dict[str, dict[str, Any]]
    evaluated: int
    skipped: int
    errors: int


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
    ):
        self.spec, self.tracking_uri, self.address, self.resume = spec, tracking_uri, address, resume
        self.storage = Path(storage_path).resolve()
        # Resolved on the driver (flag > config > $NDEBENCH_DATA_DIR > ./data) and made absolute, since
        # Ray trials run in their own working directories, possibly on other nodes.
        self.data_dir = str(resolve_data_dir(data_dir or spec.data_dir).resolve())
        self.say = printer

    def preflight(self) -> None:
        """Before Ray starts: every dataset's files are present, and a study with recorded runs continues
        only with ``resume`` (nothing is overwritten)."""
        missing = [status["problem"] for status in (dataset_status(d, self.data_dir) for d in self.spec.datasets)
                   if not status["available"]]
        if missing:
            raise FileNotFoundError("\n".join(missing))
        recorded = search(self.tracking_uri, self.spec.study)
        study_dir = self.storage / self.spec.study
        if (recorded or study_dir.exists()) and not self.resume:
            raise RuntimeError(
                f"study {self.spec.study!r} already has {len(recorded)} MLflow run(s) in {self.tracking_uri} "
                f"and/or results in {study_dir}; pass --resume to continue it, or choose a new study name"
            )

    def _start_ray(self) -> dict[str, float]:
        import ray

        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, log_to_driver=True)
            else:
                ray.init(include_dashboard=False, object_store_memory=256 * 1024**2)
        resources = ray.cluster_resources()
        self.say(f"Ray cluster: {resources.get('CPU', 0):g} CPU, {resources.get('GPU', 0):g} GPU")
        return resources

    def _place(self, gpus_available: float) -> None:
        """GPU requests only where the cluster has GPUs: elsewhere Ray would leave the trials pending forever."""
        res = self.spec.resources
        self._gpu = res.gpu if gpus_available > 0 else 0.0
        if res.gpu > 0 and self._gpu == 0:
            self.say(f"resources.gpu={res.gpu:g} requested but the cluster has no GPU: trials run on CPU")
        self._device = "cuda" if self._gpu > 0 else "cpu"

    def _trainable(self, evaluate_configs: dict[str, dict[str, Any]] | None = None) -> Any:
        from ray import tune

        fn = tune.with_parameters(trainable, tracking_uri=self.tracking_uri, evaluate_configs=evaluate_configs)
        return tune.with_resources(fn, {"cpu": self.spec.resources.cpu, "gpu": self._gpu})

    def _resolved_base(self, cell: tuple[str, str, str]) -> dict[str, Any]:
        config = self.spec.base_config(*cell)
        config["data_dir"] = self.data_dir
        config["device"] = self._device
        config.setdefault("training.threads", max(1, int(self.spec.resources.cpu)))
        return config

    def _run_config(self, name: str) -> Any:
        from ray import tune

        return tune.RunConfig(
            name=name, storage_path=str(self.storage), verbose=1,
            failure_config=tune.FailureConfig(max_failures=0),
        )

    def _tune_cell(self, cell: tuple[str, str, str], fn: Any) -> dict[str, Any]:
        from optuna.samplers import TPESampler
        from ray import tune
        from ray.tune.search.optuna import OptunaSearch

        base = self._resolved_base(cell)
        slug = cell_slug(*cell)
        best_file = self.storage / self.spec.study / slug / "best_config.json"
        keys = searched_keys(base)
        if not keys:
            self.say(f"{slug}: nothing to search, evaluating its fixed config")
            return {k: v for k, v in base.items()}
        if self.resume and best_file.exists():
            self.say(f"{slug}: tune phase already done, reusing {best_file}")
            return json.loads(best_file.read_text())
        space = {k: (v.to_tune() if isinstance(v, Space) else v) for k, v in base.items()}
        space.update(phase="tune", seed=0)
        tc = self.spec.tune
        name = f"{self.spec.study}/{slug}/tune"
        path = str(self.storage / name)
        self.say(f"{slug}: tuning {', '.join(keys)} with Optuna TPE ({tc.num_samples} trials, {tc.metric} {tc.mode})")
        if self.resume and tune.Tuner.can_restore(path):
            tuner = tune.Tuner.restore(path, fn, resume_unfinished=True, resume_errored=True)
        else:
            searcher = OptunaSearch(metric=tc.metric, mode=tc.mode, sampler=TPESampler(seed=tc.seed))
            tuner = tune.Tuner(
                fn, param_space=space,
                tune_config=tune.TuneConfig(
                    search_alg=searcher, num_samples=tc.num_samples, max_concurrent_trials=tc.max_concurrent,
                    trial_dirname_creator=lambda trial: trial.trial_id,
                ),
                run_config=self._run_config(name),
            )
        grid = tuner.fit()
        ok = [r for r in grid if r.metrics and r.metrics.get("status") == "ok" and r.metrics.get(tc.metric) is not None]
        if not ok:
            raise RuntimeError(f"{slug}: no tune trial finished ok; see the errors above and the MLflow runs")
        pick = min if tc.mode == "min" else max
        best = pick(ok, key=lambda r: r.metrics[tc.metric])
        chosen = {k: best.config[k] for k in base}
        best_file.parent.mkdir(parents=True, exist_ok=True)
        best_file.write_text(json.dumps(chosen, indent=2, sort_keys=True))
        self.say(f"{slug}: best {tc.metric}={best.metrics[tc.metric]:.4f} with " + ", ".join(f"{k}={chosen[k]}" for k in keys))
        return chosen

    def run(self) -> SweepOutcome:
        """Preflight, start Ray, tune every cell, evaluate every best config over the seeds."""
        from ray import tune

        self.preflight()
        ensure_experiment(self.tracking_uri, self.spec.study)
        resources = self._start_ray()
        self._place(resources.get("GPU", 0.0))
        fn = self._trainable()
        cells = self.spec.cells()
        best: dict[str, dict[str, Any]] = {}
        for i, cell in enumerate(cells, 1):
            self.say(f"cell {i}/{len(cells)}: model={cell[0]} dataset={cell[1]} regularizer={cell[2]}")
            best[cell_slug(*cell)] = self._tune_cell(cell, fn)
        done = finished_hashes(self.tracking_uri, self.spec.study, "evaluate") if self.resume else set()
        configs, skipped = {}, 0
        for slug, chosen in best.items():
            for seed in self.spec.evaluate.seeds:
                config = dict(chosen, phase="evaluate", seed=seed)
                if config_hash(config) in done:
                    skipped += 1
                else:
                    configs[f"{slug}#{seed}"] = config
        self.say(f"evaluate phase: {len(configs)} trial(s) over seeds {list(self.spec.evaluate.seeds)}"
                 + (f", {skipped} already recorded" if skipped else ""))
        errors = 0
        if configs:
            tuner = tune.Tuner(
                self._trainable(configs), param_space={"trial": tune.grid_search(list(configs))},
                tune_config=tune.TuneConfig(trial_dirname_creator=lambda trial: trial.trial_id),
                run_config=self._run_config(f"{self.spec.study}/evaluate-{len(done)}"),
            )
            grid = tuner.fit()
            errors = len(grid.errors)
            if errors:
                self.say(f"{errors} evaluate trial(s) raised errors; their MLflow runs carry ndebench.status=error")
                for err in grid.errors[:3]:
                    print("".join(traceback.format_exception_only(type(err), err)), file=sys.stderr)
        return SweepOutcome(self.spec.study, best, len(configs), skipped, errors)
