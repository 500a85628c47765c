"""The Ray Tune function trainable: one trial, one MLflow run, checkpoints that survive a lost worker or driver.

Every ``checkpoint_every`` epochs the full training state (:func:`ndebench.platform.worker.loop.run_trial`'s
snapshot) and the trial's MLflow run id go to ``tune.report(..., checkpoint=...)``; Ray keeps the last two per
trial under ``<storage>/<experiment>/<trial id>/checkpoint_NNNNNN``. A retried trial (``tune.max_failures``)
resumes from ``tune.get_checkpoint()`` into the same MLflow run. After the driver itself died, the evaluate
trial that ``--resume`` starts for the same config finds its unfinished MLflow run, whose tag
``ndebench.trial_dir`` names the old trial's folder, and resumes from the newest checkpoint there. Epochs the
run already logged are not logged again: a resumed trial recomputes them bit for bit.
"""
from __future__ import annotations

import io
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

from ndebench.datasets.registry import dataset_info
from ndebench.platform.cluster.joining import check_this_node
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.common.plugins import import_plugins
from ndebench.platform.engine.provenance import worker_provenance
from ndebench.platform.engine.safepaths import UnsafePathError, inside_trial, trial_folder
from ndebench.platform.failures.infrastructure import (
    TrialInfrastructureError,
    infrastructure_failure,
    infrastructure_retried,
)
from ndebench.platform.failures.leftovers import CHECKPOINT, process_folder
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.searchtrials import RESULT_PREFIX
from ndebench.platform.record.summaries import TIME_METRICS, calibration_tags, time_summaries
from ndebench.platform.record.system_metrics import system_metrics as sampled
from ndebench.platform.record.tracking import TAG, epoch_values, last_logged_step
from ndebench.platform.spec.config import config_hash
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialResult, TrialSpec
from ndebench.platform.worker.state import STATE_FILE, load_trial_state, save_trial_state

RUN_ID_FILE = "mlflow_run_id"


def trial_tags(config: dict[str, Any], phase: str) -> dict[str, str]:
    """Identity tags of a trial run, with the dataset's registered primary ``metric``."""
    tags = {
        "study": config["study"], "phase": phase, "model": config["model"], "dataset": config["dataset"],
        "regularizer": config["regularizer"], "seed": str(config.get("seed", 0)), "cell": config["cell"],
        "metric": dataset_info(config["dataset"]).metric,
    }
    if config.get("variant"):
        tags["variant"] = config["variant"]
    return tags


def member_folder(identity: str) -> str:
    """The folder of a stack member's state in the stack's checkpoints: named by the member's config hash."""
    return f"member-{identity}"


def latest_checkpoint(storage: Storage, study: str, trial_dir: str, member: str = ""
                      ) -> tuple[dict[str, Any] | None, list[str]]:
    """The newest loadable ``checkpoint_*/trial_state.pt`` under ``trial_dir`` (a run's ``ndebench.trial_dir``
    tag, relative to the storage root) and a line per checkpoint that failed to load; where ``trial_dir`` was
    a stack's, the ``checkpoint_*/member-<member>/trial_state.pt`` of the member with config hash ``member``.
    Only tensors and plain data are unpickled; a ``trial_dir`` outside the storage root, or a checkpoint a symlink
    takes out of its trial folder, raises :class:`~ndebench.platform.engine.safepaths.UnsafePathError` before it
    is read."""
    import pyarrow.fs as pafs
    import torch

    trial = trial_folder(storage, study, trial_dir)
    selector = pafs.FileSelector(trial, allow_not_found=True)
    folders = sorted((info.path for info in storage.fs.get_file_info(selector)
                      if info.type == pafs.FileType.Directory and info.base_name.startswith("checkpoint_")),
                     reverse=True)
    problems = []
    for folder in folders:
        path = f"{folder}/{STATE_FILE}"
        if member and storage.fs.get_file_info(path).type == pafs.FileType.NotFound:
            path = f"{folder}/{member_folder(member)}/{STATE_FILE}"  # a stack's checkpoint: one folder per member
        try:
            with storage.fs.open_input_file(inside_trial(storage, trial, path)) as stream:
                return torch.load(io.BytesIO(stream.read()), map_location="cpu", weights_only=True), problems
        except (OSError, EOFError, RuntimeError, pickle.UnpicklingError) as exc:
            # A checkpoint cut off while it was written leaves an older, complete one; either way it is said.
            problems.append(f"checkpoint {path} not loaded: {type(exc).__name__}: "
                            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
    return None, problems


def _resume_state(storage: Storage | None, study: str, tags: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """The checkpoint an unfinished run's tag ``ndebench.trial_dir`` points to, and a note of what was refused
    or failed to load (``""`` when nothing was)."""
    trial_dir = tags.get(f"{TAG}trial_dir")
    if storage is None or not trial_dir:
        return None, ""
    try:
        state, problems = latest_checkpoint(storage, study, trial_dir, tags.get(f"{TAG}config_hash", ""))
    except UnsafePathError as exc:
        return None, f"refused: {exc}; the trial starts from scratch"
    note = "; ".join(problems) + ("; the trial starts from scratch" if problems and state is None else "")
    return state, note


def _restored() -> tuple[dict[str, Any] | None, str | None]:
    from ray import tune

    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None, None
    with checkpoint.as_directory() as folder:
        return load_trial_state(folder), (Path(folder) / RUN_ID_FILE).read_text().strip()


def full_config(config: dict[str, Any], trials: dict[str, dict[str, Any]] | None,
                templates: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """A trial's resolved config from what Tune holds: an evaluate trial's key into ``trials``, or a search
    trial's sampled values over its cell's ``templates`` entry."""
    if trials and "trial" in config:
        return dict(trials[config["trial"]])
    return {**(templates or {}).get(config.get("cell"), {}), **config}


def for_tune(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics a report hands to Tune: the validation ones (what the searcher, ASHA and the progress view
    read; ``tune.metric`` is always one). The rest is in MLflow: Tune keeps every reported key of every trial
    (last value and running statistics) in the driver, and writes them all into each experiment-state save."""
    return {k: v for k, v in metrics.items() if k.startswith("val_")}


@infrastructure_retried
def trainable(config: dict[str, Any], *, tracking_uri: str, parents: dict[str, str],
              evaluate_configs: dict[str, dict[str, Any]] | None = None, resume_runs: dict[str, str] | None = None,
              templates: dict[str, dict[str, Any]] | None = None,
              storage_uri: str = "",
              experiment: str = "", run_tags: dict[str, str] | None = None, checkpoint_every: int = 1,
              save_weights: bool = False, plugins: tuple[str, ...] = (),
              node_check: tuple[str | None, str | None] | None = None, system_metrics: bool = True,
              trial_timeout_s: float | None = None) -> None:
    """Ray Tune function trainable: one trial, one MLflow run under its cell run, per-epoch ``tune.report``.

    Search trials get their sampled values from the searcher, completed by their cell's ``templates`` entry;
    evaluate trials get a short key ``<cell>#<seed>`` into ``evaluate_configs``; a search trial whose config hash is
    in ``resume_runs`` continues that run (an earlier driver's, cut off) from its newest checkpoint. Every report
    carries ``status`` (``running`` until the final one) and the MLflow ``run_id``, so the driver can mark a trial
    the scheduler stopped. ``run_tags`` (the driver's provenance) and this worker's host, Ray node and device are
    tags of the run; with ``save_weights`` an evaluate run logs its best weights (``model/state_dict.pt``).
    ``node_check`` (storage root, data directory) is checked on this node first, on a joined cluster whose nodes may
    have joined after the preflight. With ``system_metrics`` (and psutil installed), MLflow samples CPU, memory and
    GPU use into the run.
    A trial still running ``trial_timeout_s`` seconds after this worker started it (or restarted it from a
    checkpoint) ends with status ``timeout`` (run FAILED, ``ndebench.message`` naming ``tune.trial_timeout_s``).
    A failure of the tracking store, storage or disk is not the method's: it leaves the run open and goes to Ray,
    which retries the trial from its checkpoint (:mod:`ndebench.platform.failures.infrastructure`).
    """
    from ray import tune

    if node_check:
        check_this_node(*node_check)

    import_plugins(plugins)
    config = full_config(config, evaluate_configs, templates)
    phase = config["phase"]
    storage = Storage(storage_uri) if storage_uri else None
    trial_dir = f"{experiment}/{tune.get_context().get_trial_id()}"
    state, run_id = _restored()
    identity = config_hash(config)
    tags = trial_tags(config, phase) | (run_tags or {}) | worker_provenance(config.get("device", "cpu"),
                                                                        config.get("training.threads"))
    recorder = TrialRecorder(tracking_uri, config["study"], config, identity, tags | {"trial_dir": trial_dir},
                             parent_run_id=parents.get(config["cell"]),
                             run_id=run_id or (resume_runs or {}).get(identity))
    note = ""
    if state is None:
        state, note = _resume_state(storage, config["study"], recorder.previous_tags)
    if note:
        print(f"ndebench: run {recorder.run_id}: {note}", file=sys.stderr, flush=True)
        recorder.set_tags({"resume_note": note})
    logged = last_logged_step(recorder.client, recorder.run_id) if recorder.reattached else 0
    epoch = state["epoch"] if state is not None else 0
    latest: dict[str, float] = {}
    times: dict[str, list[float]] = {key: [] for key in TIME_METRICS}

    def on_epoch(record: dict[str, float]) -> None:
        nonlocal epoch
        epoch += 1
        latest.update(record)
        if epoch > logged:
            recorder.log_metrics(record, step=epoch)
            for key in TIME_METRICS:
                if key in record:
                    times[key].append(record[key])

    def summaries() -> dict[str, float]:
        # A run continued after epochs an earlier attempt logged takes its times from the run's history.
        if logged:
            return time_summaries({key: epoch_values(recorder.client, recorder.run_id, key) for key in TIME_METRICS})
        return time_summaries(times)

    def on_checkpoint(done: int, snapshot: Any) -> None:
        # The epoch's metrics go with every report: ASHA and the progress view read them.
        report = dict(for_tune(latest), epoch=done, status="running", run_id=recorder.run_id)
        if done % checkpoint_every:
            tune.report(report)
            return
        with process_folder(CHECKPOINT) as folder:
            save_trial_state(snapshot(), folder)
            (Path(folder) / RUN_ID_FILE).write_text(recorder.run_id)
            tune.report(report, checkpoint=tune.Checkpoint.from_directory(folder))

    spec = TrialSpec.from_flat(config)
    recorder.set_tags({"stack": "1"})  # trained alone: resources.stack 1, or a group of one
    try:
        with sampled(recorder.run_id, tracking_uri, enabled=system_metrics, check=recorder.check):
            result = run_trial(spec, on_epoch=on_epoch, on_checkpoint=on_checkpoint, resume_state=state,
                               evaluate_test=phase == "evaluate", timeout_s=trial_timeout_s)
    except Exception as exc:  # noqa: BLE001 - recorded and reported; the traceback goes to the sweep's log
        if cause := infrastructure_failure(exc, tracking_uri, f"{storage_uri or 'storage'}/{trial_dir}"):
            raise TrialInfrastructureError(f"{cause} (run {recorder.run_id})") from exc
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}"[:4000]
        recorder.finish("error", summaries(), {"error": message}, {})
        tune.report({"status": "error", "message": message, "run_id": recorder.run_id, "resume_note": note})
        return
    final = finish_run(recorder, result, phase, summaries(), save_weights)
    val_loss = result.val.get("val_loss", float("inf")) if result.status == "ok" else float("inf")
    tune.report({**for_tune(final), "val_loss": val_loss, "status": result.status, "message": result.message,
                 "run_id": recorder.run_id, "resume_note": note})


def finish_run(recorder: TrialRecorder, result: TrialResult, phase: str, summaries: dict[str, float],
               save_weights: bool) -> dict[str, float]:
    """Record ``result`` on its run and end it: protocol tags, final metrics (with ``summaries`` and the
    calibration tag), the calibration artifact and, with ``save_weights`` on an evaluate run, the weights.
    Returns the final metrics."""
    protocol = result.protocol
    tags = {"test_protocol": protocol["test_protocol"], "n_mc": protocol["n_mc"],
            "point_predictor": protocol["point_predictor"], "num_classes": protocol["num_classes"],
            "epochs": result.epochs, "best_epoch": result.best_epoch, "graph": protocol.get("graph", ""),
            **{f"regularizer.{key}": value for key, value in protocol["regularizer"].items()}}
    if result.message:
        tags["message"] = result.message
    final = {**result.val, **result.test} if result.status == "ok" else {}
    # The per-epoch val_* metrics keep the last epoch's value on the run; the search ranks by the reported one.
    final |= {f"{RESULT_PREFIX}{k}": v for k, v in result.val.items()} if result.status == "ok" else {}
    artifacts = {"calibration.json": result.calibration} if result.calibration else {}
    summary = summaries
    tags |= calibration_tags(result.calibration) if result.calibration else {}
    if save_weights and phase == "evaluate" and result.weights is not None:
        from ndebench.platform.common.weights import log_weights

        log_weights(recorder.client, recorder.run_id, result.weights)
    recorder.finish(result.status, final | summary, tags, artifacts)
    return final
