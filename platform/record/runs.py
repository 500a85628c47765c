"""The one reader of a study's runs: what reports, analyses, resume, reevaluate and the API read from MLflow.

:func:`evaluate_runs`: one row per current evaluate trial run (:mod:`~ndebench.platform.record.completeness`:
the run of the config the latest sweep planned, per (cell, seed)) with its status, message and test metrics (the
rows the tables count). :func:`runs_frame`: one row per run of a phase for analyses. :func:`study_frame`: the
two joined with the run's params, the one frame of a study's results that the API, the tables and the analyses
read. :func:`runs_frame`'s columns: ``run_id,
parent_run_id, study, model, dataset, regularizer, variant, fixed, label, seed, status, n_mc``, ``metric`` (the
dataset's registered primary metric, tag ``ndebench.metric``; ``""`` on older runs), ``p, m, rate, ...`` (the
regularizers' parameters, :func:`regularizer_params`, from the run's params ``regularizer.p`` ...; NaN where
absent), every ``test_*`` metric, ``train_time_s`` and ``epoch_time_s`` (means over the run's epochs: its final
metrics ``mean_train_time_s`` and ``mean_epoch_time_s``) and ``params`` (the run's flat config, values parsed back
from strings). ``fixed`` holds the values the run's cell fixes (:func:`fixed_values`: ``{"p": 0.3, "m": 50}`` for a
fixed-parameter variant, ``{}`` for a tuned cell) and ``label`` is the cell's name made from them
(:func:`~ndebench.platform.common.labels.cell_label`): the variant label, else the regularizer, with ``scope=time``
where the run ran with ``scope: time``. Both give a run the status of
:func:`~ndebench.platform.record.tracking.run_status`. :func:`planned_seeds`: the seeds the study planned.

Everything comes from paged ``search_runs`` (:mod:`~ndebench.platform.record.summaries`); only runs recorded
before their summaries existed cost a request each (a ``calibration.json`` download, a metric history).
"""
from __future__ import annotations

import ast
import copy
import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
from ndebench.platform.common.labels import cell_label, variant_label
from ndebench.platform.record import store, tracking
from ndebench.platform.record.completeness import counted_runs
from ndebench.platform.record.schema import MACHINE_TAGS, PLANNED_SEEDS, TAG
from ndebench.platform.record.searchtrials import RESULT_PREFIX
from ndebench.platform.record.summaries import MEAN_PREFIX, TIME_METRICS, calibration_from_run, mean_over_epochs

SEARCH_PHASES = ("base", "tune")


def regularizer_params() -> tuple[str, ...]:
    """The columns of the regularizers' parameters: every numeric hyperparameter a registered regularizer
    declares (:class:`~ndebench.regularizers.catalog.HyperParam`, plugins included), in the order of their
    declarations (``p, m, rate, size, b, bins, decay`` for the built-ins). ``n_mc`` is left out: it is the cell's
    own column, read from its tag."""
    from ndebench.regularizers.registry import list_regularizers, regularizer_info

    declared = (key for name in list_regularizers() for key, hp in regularizer_info(name).hyperparams.items()
                if hp.numeric and key != "n_mc")
    return tuple(dict.fromkeys(declared))


def parse_param(text: str) -> Any:
    """A param value logged as ``str(value)`` back to the value (``"8"`` -> 8, ``"None"`` -> None); strings
    that are no Python literal stay strings."""
    value = _literal(text)
    return copy.deepcopy(value) if isinstance(value, (list, dict, set)) else value


@functools.lru_cache(maxsize=1 << 16)
def _literal(text: str) -> Any:
    # A study's runs repeat a few hundred distinct values over hundreds of thousands of params.
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _mean_time(client: Any, run: Any, key: str) -> float:
    """The run's ``mean_<key>``; for a run recorded before it, the mean of its history (one request)."""
    metrics = run.data.metrics
    if f"{MEAN_PREFIX}{key}" in metrics:
        return metrics[f"{MEAN_PREFIX}{key}"]
    if key not in metrics:
        return math.nan
    return mean_over_epochs(tracking.epoch_values(client, run.info.run_id, key))


def _tag(tags: dict[str, str], key: str, default: str = "") -> str:
    return tags.get(f"{tracking.TAG}{key}", default)


def recorded(uri: str, study: str, phase: str = "evaluate") -> list[Any]:
    """Every run of ``study`` tagged ``phase`` (trial and cell runs), in one paged search: what
    :func:`runs_frame`, :func:`evaluate_runs` and ``completeness.left_out_finished`` read, so that a caller
    needing several of them reads the study once."""
    return tracking.search(uri, study, f"tags.`{TAG}phase` = '{phase}'")


def runs_frame(uri: str, study: str, phase: str = "evaluate", *, histories: bool = True,
               runs: list[Any] | None = None) -> pd.DataFrame:
    """One row per run of ``study`` in ``phase`` (``evaluate`` or ``reevaluate``; ``runs``: :func:`recorded`
    when already read), columns as in the module docstring; of the evaluate trial runs only those a report counts
    (:func:`~ndebench.platform.record.completeness.counted_runs`). ``histories`` adds the time columns (one
    request per run and metric only for older runs)."""
    client = store.client(uri)
    rows, cells, declared = [], [], regularizer_params()
    runs = recorded(uri, study, phase) if runs is None else runs
    for run in counted_runs(runs) if phase == "evaluate" else runs:
        tags, params = run.data.tags, {k: parse_param(v) for k, v in run.data.params.items()}
        row: dict[str, Any] = {
            "run_id": run.info.run_id, "parent_run_id": tags.get("mlflow.parentRunId", ""), "study": study,
            "model": _tag(tags, "model"), "dataset": _tag(tags, "dataset"), "regularizer": _tag(tags, "regularizer"),
            "variant": _tag(tags, "variant"), "seed": int(_tag(tags, "seed", "-1")),
            "status": tracking.run_status(run), "n_mc": int(_tag(tags, "n_mc", "0") or 0),
            "metric": _tag(tags, "metric"),
            **{name: _number(params.get(f"regularizer.{name}")) for name in declared},
            **{k: v for k, v in run.data.metrics.items() if k.startswith("test_")},
            "params": params,
        }
        cells.append(_tag(tags, "cell"))
        row["fixed"] = fixed_values(run.data.params, row["regularizer"], row["variant"], strict=False)
        if row["fixed"] is None and (source := _tag(tags, "source_run")):
            # A reevaluate run recorded before it copied its source's values: its source run's.
            row["fixed"] = fixed_values(client.get_run(source).data.params, row["regularizer"], row["variant"],
                                        strict=False)
        if histories:
            row.update({key: _mean_time(client, run, key) for key in TIME_METRICS})
        rows.append(row)
    # A cell run recorded before cell runs carried their ``fixed`` has no values to look its tag up among: its
    # trial runs' are its cell's; one whose trials have not started yet holds nothing to report and is left out.
    known = {cell: row["fixed"] for cell, row in zip(cells, rows, strict=True) if cell and row["fixed"] is not None}
    kept = []
    for cell, row in zip(cells, rows, strict=True):
        if row["fixed"] is None:
            if row["params"] or not cell:
                raise ValueError(f"variant {row['variant']!r} of a {row['regularizer']!r} run "
                                 f"({row['run_id']}) is no name its recorded settings or its cell's trials make")
            if cell not in known:
                continue
            row["fixed"] = known[cell]
        row["label"] = cell_label(row["regularizer"], row["fixed"], row["params"].get("regularizer.scope"))
        kept.append(row)
    return pd.DataFrame(kept)


def fixed_values(params: dict[str, str], regularizer: str, variant: str | None, *,
                 strict: bool = True) -> dict[str, Any] | None:
    """The values a run's cell fixes, as its label names them, from the run's ``params`` as recorded (strings): its
    param ``fixed`` (the plan's, parsed back); ``{}`` for a tuned cell's run. A variant run recorded before that
    param existed has its ``variant`` tag: its values are the ordered choice of its own ``regularizer.*`` and
    ``model.*`` params that :func:`~ndebench.platform.common.labels.variant_label` names as that tag (the tag is
    looked up among the names its run's values make, never taken apart). When none does: ``ValueError``, or
    ``None`` with ``strict=False`` (a cell run, whose cell's trial runs hold its values)."""
    recorded = parse_param(params.get("fixed", "None"))
    if isinstance(recorded, dict):
        return recorded
    if not variant:
        return {}
    settings = {key.removeprefix("regularizer."): text for key, text in sorted(params.items())
                if key.startswith(("regularizer.", "model."))}
    found = _named_by(regularizer, variant, tuple(settings.items()))
    if found is None and not strict:
        return None
    if found is None:
        raise ValueError(f"variant {variant!r} of a {regularizer!r} run is no name its recorded settings make")
    return {key: parse_param(text) for key, text in found}


@functools.lru_cache(maxsize=1 << 10)
def _named_by(regularizer: str, variant: str, settings: tuple[tuple[str, str], ...],
              chosen: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[str, str], ...] | None:
    """The ordered ``settings`` (label key, recorded text) whose variant label is ``variant``, grown one setting at a
    time while the name made so far begins ``variant``; ``None`` when no order of them makes it."""
    if chosen and variant_label(regularizer, dict(chosen)) == variant:
        return chosen
    for key, text in settings:
        grown = (*chosen, (key, text))
        if key not in dict(chosen) and variant.startswith(variant_label(regularizer, dict(grown))[:-1]):
            if (found := _named_by(regularizer, variant, settings, grown)) is not None:
                return found
    return None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def planned_seeds(uri: str, study: str) -> list[int] | None:
    """The evaluation seeds the study planned: tag ``ndebench.evaluate_seeds`` (the latest sweep's, a JSON list)
    or else param ``evaluate.seeds`` of its run tagged ``ndebench.kind=study``; ``None`` without such a run."""
    for run in tracking.search(uri, study, f"tags.`{TAG}kind` = 'study'"):
        raw = run.data.tags.get(PLANNED_SEEDS) or run.data.params.get("evaluate.seeds")
        if raw:
            try:
                seeds = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(seeds, list) and all(isinstance(s, int) for s in seeds):
                return sorted(seeds)
    return None


def evaluate_runs(uri: str, study: str, *, with_calibration: bool = True, variants: bool = False,
                  runs: list[Any] | None = None) -> pd.DataFrame:
    """One row per evaluate-phase trial run: identity tags, status (``ok``, ``diverged``, ``error``, ``running``,
    ``stopped``), the error or divergence ``message``, protocol, the dataset's registered primary ``metric``
    (tag ``ndebench.metric``: ``accuracy``, ``auroc`` or ``top5_accuracy``; ``""`` on runs recorded before
    the tag existed), ``fixed`` and ``label`` (the values its cell fixes and the cell's name, as in
    :func:`runs_frame`), ``test_*`` metrics, calibration bins, ``num_classes`` K (tag ``ndebench.num_classes``; -1
    on older runs), the machine it ran on (:data:`~ndebench.platform.record.schema.MACHINE_TAGS`: ``cpu_model``,
    ``cpu_capability``, ``threads``, ``gpu``, ``gpu_driver``; ``""`` on older runs) and ``final_train_loss`` (the
    last epoch's ``train_loss``). Runs of fixed-parameter
    variant cells (column ``variant``) only with ``variants=True``; of the attempts of one (cell, seed), only
    its current run under the plan the latest sweep recorded (:mod:`~ndebench.platform.record.completeness`):
    never two runs of one (cell, seed), never a run of another config or of a seed or cell the config no longer
    has. ``runs``: :func:`recorded` when already read (with the cell runs, which carry the plan)."""
    # Hundreds of tiny calibration.json downloads would each print a progress bar.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    rows = []
    mlflow_client = store.client(uri)
    runs = recorded(uri, study) if runs is None else runs
    for run in counted_runs(runs):
        tags = run.data.tags
        if tags.get(f"{TAG}kind") == "cell" or (tags.get(f"{TAG}variant") and not variants):
            continue
        row: dict[str, Any] = {
            "variant": tags.get(f"{TAG}variant", ""),
            "run_id": run.info.run_id,
            "study": study,
            **{key: tags.get(f"{TAG}{key}") for key in ("model", "dataset", "regularizer", "config_hash")},
            "status": tracking.run_status(run),
            "message": tags.get(f"{TAG}error") or tags.get(f"{TAG}message") or "",
            "seed": _int_tag(tags.get(f"{TAG}seed")),
            "test_protocol": tags.get(f"{TAG}test_protocol", ""),
            "metric": tags.get(f"{TAG}metric", ""),
            "fixed": (fixed := fixed_values(run.data.params, tags.get(f"{TAG}regularizer", ""),
                                            tags.get(f"{TAG}variant"))),
            "label": cell_label(tags.get(f"{TAG}regularizer"), fixed, run.data.params.get("regularizer.scope")),
            "num_classes": _int_tag(tags.get(f"{TAG}num_classes")),
            **{key: tags.get(f"{TAG}{key}", "") for key in MACHINE_TAGS},
            # MLflow keeps each metric's value at its last step on the run: the final epoch's training loss.
            "final_train_loss": run.data.metrics.get("train_loss", math.nan),
        }
        row.update({k: v for k, v in run.data.metrics.items() if k.startswith("test_")})
        if with_calibration and row["status"] == "ok":
            row["calibration"] = (calibration_from_run(run.data.metrics, tags)
                                  or _load_json(mlflow_client, run.info.run_id, "calibration.json"))
        rows.append(row)
    return pd.DataFrame(rows)


def _int_tag(raw: str | None) -> int:
    """An integer tag (seed, class count), -1 where absent or not an integer."""
    try:
        return int(raw)
    except (TypeError, ValueError):
        return -1


def _load_json(mlflow_client: Any, run_id: str, name: str) -> dict[str, Any] | None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow_client.download_artifacts(run_id, name, tmp)
        except Exception:  # noqa: BLE001 - an older run may lack the artifact; the report then omits its bins
            return None
        try:
            return json.loads(Path(path).read_text())
        except ValueError:
            return None


def study_frame(uri: str, study: str, *, histories: bool = False, runs: list[Any] | None = None) -> pd.DataFrame:
    """The one frame of ``study``'s results, what ``api.results`` returns and ``ndebench report`` tabulates and
    analyses: one row per evaluate-phase trial run the report counts (:func:`evaluate_runs` with its variant
    cells), sorted by model, dataset, label and seed, with the cell key as columns: ``model, dataset,
    regularizer`` (the regularizer the run trained with), ``variant`` (``""`` for a tuned cell) and ``label`` (the
    cell's name: its variant label, e.g. ``continuum_dropout[p=0.3,m=50]``, or its regularizer) and ``n_mc``; then
    :func:`evaluate_runs`' columns, the regularizers' parameters (:func:`regularizer_params`), ``parent_run_id``, with
    ``histories`` the time columns of :func:`runs_frame`, and ``params.<key>`` (the run's flat config, one column per
    key, as ``mlflow.search_runs`` names them; missing where a run lacks the key). ``runs``: :func:`recorded`."""
    runs = recorded(uri, study) if runs is None else runs
    frame = runs_frame(uri, study, histories=histories, runs=runs)
    found = evaluate_runs(uri, study, variants=True, runs=runs)
    if found.empty or frame.empty:
        return found
    extra = ["run_id", *(c for c in frame.columns if c not in found.columns and c != "params")]
    keys = sorted({f"params.{key}" for params in frame["params"] for key in params})
    merged = found.merge(flat_params(frame)[extra + keys], on="run_id", how="left")
    return merged.sort_values(["model", "dataset", "label", "seed"], kind="stable", ignore_index=True)


def whole_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each setting column (``params.*``, a regularizer's parameter) whose values are all whole
    numbers as nullable integers, as a CSV should show them (``16``, not the ``16.0`` of a float column that a
    missing value made)."""
    settings = [c for c in frame.columns if c.startswith("params.") or c in regularizer_params()]
    return frame.astype({c: "Int64" for c in settings if _whole(frame[c])})


def _whole(column: pd.Series) -> bool:
    values = column.dropna()
    return pd.api.types.is_float_dtype(column) and not values.empty and bool(values.map(float.is_integer).all())


def flat_params(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``params`` dicts spread into ``params.<key>`` columns (as ``mlflow.search_runs``)."""
    params = pd.DataFrame(list(frame["params"]), index=frame.index).add_prefix("params.")
    return pd.concat([frame.drop(columns="params"), params[sorted(params.columns)]], axis=1)


def trials_frame(uri: str, study: str, phase: str = "tune") -> pd.DataFrame:
    """The search trials of ``study``'s stage ``phase`` (``base``: the shared base search, ``tune``: the
    per-cell search): one row per trial run (not the cell runs), oldest first.

    Columns: ``run_id``, ``cell_run_id`` (the cell run above it), ``cell, model, dataset, regularizer``,
    ``seed`` (int), ``status``, ``start_time`` (UTC), the validation metrics the trial reported to Ray Tune
    (``val_*``: its selected epoch's values, where recorded, else the last epoch's) and ``params.<key>`` (its
    sampled and fixed config). ``ValueError`` for an unknown phase."""
    if phase not in SEARCH_PHASES:
        raise ValueError(f"unknown search phase {phase!r}; valid: {', '.join(SEARCH_PHASES)}")
    rows = []
    for run in tracking.search(uri, study, f"tags.`{TAG}phase` = '{phase}' and tags.`{TAG}kind` = 'trial'"):
        tags, metrics = run.data.tags, run.data.metrics
        chosen = {k[len(RESULT_PREFIX):]: v for k, v in metrics.items() if k.startswith(f"{RESULT_PREFIX}val_")}
        rows.append({"run_id": run.info.run_id, "cell_run_id": tags.get("mlflow.parentRunId", ""),
                     **{key: tags.get(f"{TAG}{key}", "") for key in ("cell", "model", "dataset", "regularizer")},
                     "seed": int(tags.get(f"{TAG}seed", "0") or 0), "status": tracking.run_status(run),
                     "start_time": pd.to_datetime(run.info.start_time, unit="ms", utc=True),
                     **{k: v for k, v in sorted(metrics.items()) if k.startswith("val_")}, **chosen,
                     "params": {k: parse_param(v) for k, v in run.data.params.items()}})
    if not rows:
        return pd.DataFrame(columns=["run_id", "cell_run_id", "cell", "model", "dataset", "regularizer", "seed",
                                     "status", "start_time"])
    return flat_params(pd.DataFrame(rows)).sort_values("start_time", kind="stable", ignore_index=True)
