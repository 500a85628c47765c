"""MLflow layout: experiment = study, one run per trial, tags/params/metrics of design.md section 5; the store
itself (URI, client, lock, retry) is :mod:`~ndebench.platform.record.store`."""
from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ndebench.platform.record.lease.fence import is_lease
from ndebench.platform.record.lease.ledger import nest_lease_runs
from ndebench.platform.record.schema import (
    PARENT,
    PLANNED_SEEDS,
    RESULT_LEASE,
    SWEEP_SHA,
    TAG,
)
from ndebench.platform.record.standard_tags import standard_tags
from ndebench.platform.record.store import client, ensure_experiment, retry, sqlite_path
from ndebench.platform.record.summaries import text_sha

# ndebench.status of a run without that tag, from MLflow's own run status.
MLFLOW_STATUS = {"RUNNING": "running", "SCHEDULED": "running", "FINISHED": "ok", "FAILED": "error", "KILLED": "stopped"}


def require_study(uri: str, study: str) -> None:
    """``ValueError`` naming the studies at ``uri`` when ``study`` is not one of them."""
    studies = study_names(uri)
    if study not in studies:
        raise ValueError(f"study {study!r} is not in {uri}; studies there: {', '.join(studies) or 'none'}")


def study_names(uri: str) -> list[str]:
    """Names of the studies (experiments) in the tracking store; ``[]`` without creating a missing sqlite file."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return []
    mlflow_client, names, token = client(uri), [], None
    while True:
        page = mlflow_client.search_experiments(page_token=token)
        names += [e.name for e in page if e.name != "Default" and not is_lease(e.name)]
        token = page.token
        if not token:
            return sorted(names)


def run_name(config: dict[str, Any]) -> str:
    """A short readable trial run name: the regularizer's initials, its fixed parameters, the seed, and the
    stage for search trials, e.g. ``cd m=10 p=0.3 s0`` or ``base none lr=0.003 s0``; the cell run above it
    names the model and dataset."""
    regularizer = config["regularizer"]
    short = "".join(part[0] for part in regularizer.split("_")) if "_" in regularizer else regularizer
    keys = [k for k in sorted(config)
            if k.startswith("regularizer.") and k not in ("regularizer.n_mc", "regularizer.mask")]
    if config.get("phase") == "base":
        keys += [k for k in ("training.lr", "model.hidden_size", "model.num_layers") if k in config]
    values = [f"{k.split('.', 1)[1]}={config[k]:g}" if isinstance(config[k], float)
              else f"{k.split('.', 1)[1]}={config[k]}"
              for k in keys]
    phase = "" if config.get("phase") == "evaluate" else f"{config.get('phase')} "
    return " ".join([f"{phase}{short}", *values, f"s{config.get('seed', 0)}"])


# Runs per search_runs page. MLflow's store pays per page for the session that loads it (on sqlite, expiring
# every loaded row at its commit): 10,000-run pages read a 24,000-run study in 12.7 s, 1,000-run pages in 18.3 s.
PAGE = 10_000


def search(uri: str, study: str, filter_string: str = "") -> list[Any]:
    """All runs of ``study`` matching an MLflow filter string (paged through), its lease runs left out."""
    mlflow_client = client(uri)
    experiment = mlflow_client.get_experiment_by_name(study)
    if experiment is None:
        return []
    runs, token = [], None
    with _collector_paused():
        while True:
            page = mlflow_client.search_runs([experiment.experiment_id], filter_string=filter_string,
                                             max_results=PAGE, page_token=token)
            # The study's lease runs (record.lease.ledger) are bookkeeping, never a trial, cell or study run; one
            # with a phase is a run retagged to hide it, which readers see (and report.integrity flags).
            runs += [r for r in page if r.data.tags.get(f"{TAG}kind") != "lease" or f"{TAG}phase" in r.data.tags]
            token = page.token
            if not token:
                return runs


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: reading a large study makes millions of small objects
    (none in reference cycles), and the collector's passes over them cost twice the read itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def epoch_values(mlflow_client: Any, run_id: str, metric: str) -> list[float]:
    """Every value of ``metric`` a run logged, in step order (one history request)."""
    history = retry(lambda: mlflow_client.get_metric_history(run_id, metric))
    return [m.value for m in sorted(history, key=lambda m: (m.step, m.timestamp))]


def last_logged_step(mlflow_client: Any, run_id: str, metric: str = "train_loss") -> int:
    """The last epoch step of ``metric`` a run has logged (0 if none)."""
    history = retry(lambda: mlflow_client.get_metric_history(run_id, metric))
    return max((m.step for m in history), default=0)


def run_status(run: Any) -> str:
    """``ndebench.status`` of a run (``running`` while a trial trains), else one derived from MLflow's status;
    ``interrupted`` (``--resume`` continues it) where the result on it was written by the trial of a driver that
    had lost the study after a newer driver continued the run (tag ``ndebench.result_lease`` below
    ``ndebench.lease``)."""
    tags = run.data.tags
    if _epoch(tags.get(f"{TAG}{RESULT_LEASE}")) < _epoch(tags.get(f"{TAG}lease")):
        return "interrupted"
    return tags.get(f"{TAG}status") or MLFLOW_STATUS.get(run.info.status, "error")


def _epoch(text: str | None) -> int:
    """A lease epoch tag's number; where absent (``ndebench.result_lease`` of runs recorded before it) or no
    number, a number above every epoch, so such a run keeps its own status."""
    return int(text) if text and text.isascii() and text.isdigit() else 1 << 62


def close_orphaned_runs(uri: str, study: str, phase: str, reasons: dict[str, Any] | None = None,
                        tags: dict[str, str] | None = None) -> list[str]:
    """Close as ``error`` the ``phase`` runs of ``study`` (and with ``tags``) still marked running; return
    their run ids.

    Called when every trial they belong to has ended: a run still running then belonged to a worker that
    died (killed, out of memory, node lost) before it could record an outcome. ``reasons`` maps config
    hashes to what Ray reported for that trial (an exception or text; its first line is kept). The message
    goes to the ``ndebench.error`` tag, where ``ndebench report`` shows it.
    """
    from mlflow.entities import RunTag

    mlflow_client = client(uri)
    closed = []
    where = " and ".join(f"tags.`{TAG}{k}` = '{v}'" for k, v in ({"phase": phase} | (tags or {})).items())
    # Only runs that can read as running are fetched (a status tag of `running`, or none and an MLflow status that
    # maps to it): a stage of thousands of trials would otherwise be read whole at its end.
    open_runs: dict[str, Any] = {}
    for clause in [f"tags.`{TAG}status` = 'running'",
                   *(f"attributes.status = '{s}'" for s, ours in MLFLOW_STATUS.items() if ours == "running")]:
        for run in search(uri, study, f"{where} and {clause}"):
            open_runs.setdefault(run.info.run_id, run)
    for run in open_runs.values():
        if run_status(run) != "running":
            continue
        reason = _first_line((reasons or {}).get(run.data.tags.get(f"{TAG}config_hash", "")))
        message = (f"the worker running this trial died before recording an outcome"
                   f"{': ' + reason if reason else ''}; closed by the sweep driver at the end of the {phase} phase")
        tags = [RunTag(f"{TAG}status", "error"), RunTag(f"{TAG}error", message[:4000])]
        run_id = run.info.run_id
        retry(lambda run_id=run_id, tags=tags: mlflow_client.log_batch(run_id, tags=tags))
        retry(lambda run_id=run_id: mlflow_client.set_terminated(run_id, "FAILED"))
        closed.append(run.info.run_id)
    return closed


def _first_line(reason: Any) -> str:
    text = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def log_report_artifacts(uri: str, study: str, files: list[Path]) -> str:
    """Log report files as artifacts of the study's ``report`` run (one per study, replaced files overwrite)."""
    mlflow_client = client(uri)
    experiment_id = ensure_experiment(uri, study)
    existing = search(uri, study, f"tags.`{TAG}kind` = 'study'") or search(uri, study, f"tags.`{TAG}phase` = 'report'")
    if existing:
        run_id = existing[0].info.run_id
    else:
        run_id = mlflow_client.create_run(
            experiment_id, tags={f"{TAG}phase": "report", f"{TAG}study": study}, run_name=f"report-{study}"
        ).info.run_id
        mlflow_client.set_terminated(run_id, "FINISHED")
    for path in files:
        mlflow_client.log_artifact(run_id, str(path), "report")
    return run_id


def _tagged(uri: str, study: str, tags: dict[str, str]) -> list[Any]:
    return search(uri, study, " and ".join(f"tags.`{TAG}{k}` = '{v}'" for k, v in tags.items()))


def study_run(uri: str, study: str, *, description: str, params: dict[str, Any], yaml_text: str | None,
              tags: dict[str, str] | None = None) -> str:
    """The study's parent run (``ndebench.kind=study``): the sweep YAML as artifact ``sweep.yaml``, the
    description as its note, the protocol settings and the YAML's SHA-256 (:data:`SWEEP_SHA`) as params, ``tags``
    (provenance) with the ``ndebench.`` prefix, and the parent of the study's lease runs
    (:func:`~ndebench.platform.record.lease.ledger.nest_lease_runs`).
    Created once; a resumed sweep reuses it."""
    from mlflow.entities import Param, RunTag

    existing = _tagged(uri, study, {"kind": "study"})
    if existing:
        run_id = existing[0].info.run_id
        retry(lambda: client(uri).update_run(run_id, status="RUNNING"))
        # Params are immutable, so what a resumed sweep plans now (e.g. added seeds) goes to a tag.
        planned = [RunTag(PLANNED_SEEDS, params["evaluate.seeds"])] if "evaluate.seeds" in params else []
        retry(lambda: client(uri).log_batch(run_id, tags=[RunTag(f"{TAG}status", "running"), *planned]))
        retry(lambda: nest_lease_runs(client(uri), existing[0].info.experiment_id, run_id))
        return run_id
    mlflow_client = client(uri)
    tags = {f"{TAG}kind": "study", f"{TAG}study": study, "mlflow.note.content": description or study,
            **({PLANNED_SEEDS: params["evaluate.seeds"]} if "evaluate.seeds" in params else {}),
            **{f"{TAG}{k}": str(v) for k, v in (tags or {}).items()}} | standard_tags((tags or {}).get("git_commit"))
    experiment_id = ensure_experiment(uri, study)
    if description:
        retry(lambda: mlflow_client.set_experiment_tag(experiment_id, "mlflow.note.content", description))
    run_id = retry(lambda: mlflow_client.create_run(experiment_id, tags=tags, run_name=study)).info.run_id
    params = params | {SWEEP_SHA: text_sha(yaml_text)}
    retry(lambda: mlflow_client.log_batch(run_id, params=[Param(k, str(v)) for k, v in sorted(params.items())]))
    if yaml_text is not None:
        mlflow_client.log_text(run_id, yaml_text, "sweep.yaml")
    retry(lambda: nest_lease_runs(mlflow_client, experiment_id, run_id))
    return run_id


def study_yaml(uri: str, study: str, *, bound: bool = True) -> str | None:
    """The sweep YAML the study's run recorded (:func:`study_run`), ``None`` when it has none or (``bound``) when
    it differs from the SHA-256 the run recorded as it began (:data:`SWEEP_SHA`: overwritten since, which
    ``report.integrity`` flags)."""
    import tempfile

    found = _tagged(uri, study, {"kind": "study"})
    if not found:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client(uri).download_artifacts(found[0].info.run_id, "sweep.yaml", tmp)
        except Exception:  # noqa: BLE001 - a study written through the API records no YAML
            return None
        text = Path(path).read_text()
    recorded = found[0].data.params.get(SWEEP_SHA)
    return None if bound and recorded is not None and recorded != text_sha(text) else text


def cell_run_name(phase: str, tags: dict[str, str]) -> str:
    """A cell run's name, for people: what tells a study's cells apart first (its variant's label, else the
    regularizer), then model and dataset (from the cell's identity ``tags``), and the stage where it is not
    ``evaluate``, e.g. ``continuum_dropout · neural_cde · uea/BasicMotions``. Code reads the ``ndebench.*`` tags,
    never the name."""
    parts = [tags.get("variant") or tags.get("regularizer", ""), tags.get("model", ""), tags.get("dataset", "")]
    return " · ".join([p for p in parts if p] + ([] if phase == "evaluate" else [phase]))


def cell_run(uri: str, study: str, parent: str, phase: str, key: str, tags: dict[str, str],
             params: dict[str, Any] | None = None) -> str:
    """The parent run of one cell in one stage (``ndebench.kind=cell``, child of the study run), with ``params``
    (a variant cell's ``fixed``) logged where it lacks them. A resumed sweep reuses it, resetting a ``failed``
    status to ``running``."""
    from mlflow.entities import Param, RunTag

    mlflow_client = client(uri)
    existing = _tagged(uri, study, {"kind": "cell", "phase": phase, "cell": key})
    if existing:
        run_id = existing[0].info.run_id
        missing = [Param(k, str(v)) for k, v in (params or {}).items() if k not in existing[0].data.params]
        if missing:
            retry(lambda: mlflow_client.log_batch(run_id, params=missing))
        retry(lambda: mlflow_client.update_run(run_id, status="RUNNING"))
        if f"{TAG}error" in existing[0].data.tags:
            mlflow_client.delete_tag(run_id, f"{TAG}error")
        retry(lambda: mlflow_client.log_batch(run_id, tags=[RunTag(f"{TAG}status", "running")]))
        return run_id
    all_tags = {f"{TAG}{k}": str(v) for k, v in tags.items()} | {
        f"{TAG}kind": "cell", f"{TAG}phase": phase, f"{TAG}cell": key, f"{TAG}study": study,
        f"{TAG}status": "running", PARENT: parent,
    } | standard_tags(tags.get("git_commit"))
    run = retry(lambda: mlflow_client.create_run(ensure_experiment(uri, study), tags=all_tags,
                                                  run_name=cell_run_name(phase, tags)))
    if params:
        retry(lambda: mlflow_client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()]))
    return run.info.run_id


def finish_cell(uri: str, run_id: str, status: str, *, params: dict[str, Any] | None = None,
                metrics: dict[str, float] | None = None, error: str | None = None) -> None:
    """End a cell run: ``status`` ``done`` (with the chosen config as params and the metrics) or ``failed``
    (with ``ndebench.error``, the first error message)."""
    from mlflow.entities import Metric, Param, RunTag

    mlflow_client = client(uri)
    now = int(time.time() * 1000)
    tags = [RunTag(f"{TAG}status", status)] + ([RunTag(f"{TAG}error", error[:4000])] if error else [])
    retry(lambda: mlflow_client.log_batch(
        run_id, tags=tags, params=[Param(k, str(v)) for k, v in sorted((params or {}).items())],
        metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
    ))
    retry(lambda: mlflow_client.set_terminated(run_id, "FINISHED" if status == "done" else "FAILED"))


def cell_states(uri: str, study: str, phase: str) -> dict[str, Any]:
    """The study's cell runs of ``phase`` by cell key (each with its tags and params)."""
    return {r.data.tags[f"{TAG}cell"]: r for r in _tagged(uri, study, {"kind": "cell", "phase": phase})}


def mark_stopped(uri: str, run_id: str) -> None:
    """A trial the scheduler stopped early: ``ndebench.status=stopped``, run KILLED."""
    from mlflow.entities import RunTag

    mlflow_client = client(uri)
    retry(lambda: mlflow_client.log_batch(run_id, tags=[RunTag(f"{TAG}status", "stopped")]))
    retry(lambda: mlflow_client.set_terminated(run_id, "KILLED"))
