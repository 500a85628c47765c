"""The Python API for notebooks and scripts, and the one facade of the ``ndebench`` command: load a sweep spec,
validate it, run it, read its results, report.

The same steps as ``ndebench validate``, ``ndebench run``, ``ndebench reevaluate`` and ``ndebench report``, as
functions that return values instead of printing::

    from ndebench.platform import api

    spec = api.load("tune_configs/quickstart.yaml", ["training.epochs=2", "tune.num_samples=2"])
    api.validate(spec)                      # [] or warnings; raises ConfigError on a bad value
    result = api.run(spec)                  # trains on Ray, records in MLflow
    api.studies()                           # the studies recorded, one row each
    runs = api.results(spec.study)          # one row per evaluate run, params as params.* columns
    search = api.trials(spec.study, "tune") # one row per search trial with its validation metrics
    figs = api.figures(runs)                # matplotlib figures per (model, dataset)
    rep = api.report(runs, "reports")       # tables as text and files
    api.report_study(spec.study)            # all that `ndebench report` writes, logged to MLflow

Each function is a thin wrapper over the module that does the work (:mod:`~ndebench.platform.spec.config`,
:mod:`~ndebench.platform.spec.buildcheck`, :mod:`~ndebench.platform.engine.sweep`,
:mod:`~ndebench.platform.record.runs`, :mod:`~ndebench.platform.report.report`,
:mod:`~ndebench.platform.report.analyses`); errors are the ones the command line prints
(:class:`~ndebench.platform.spec.config.ConfigError` and ``ValueError`` naming the bad value).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from ndebench.platform.engine.sweep import SweepOutcome
from ndebench.platform.spec.config import SweepSpec, apply_overrides, load_spec, parse_spec

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from ndebench.platform.report.report import ReportFiles


def load(source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> SweepSpec:
    """A validated :class:`~ndebench.platform.spec.config.SweepSpec` from a sweep YAML file or from a mapping with
    the YAML's structure, with ``overrides`` (``"KEY=VALUE"`` as for ``--set``: dotted key, value parsed as
    YAML, e.g. ``"training.epochs=2"``) applied before validation. Raises ``ConfigError`` naming the bad key
    or value."""
    if isinstance(source, Mapping):
        spec = parse_spec(apply_overrides(dict(source), overrides))
        return dataclasses.replace(spec, overrides=tuple(overrides))
    return load_spec(source, overrides)


def validate(spec: SweepSpec) -> list[str]:
    """What ``ndebench validate`` checks beyond :func:`load`: every model configuration of the sweep is built
    once on a tiny input (a value a model refuses raises ``ConfigError``). Returns the warnings (e.g. a TPE
    budget that never leaves Optuna's random start-up phase, or a setting that is ndebench's extension of the paper,
    :mod:`~ndebench.platform.spec.extensions`), ``[]`` when there are none."""
    from ndebench.platform.spec.buildcheck import check_models_build, tpe_warnings
    from ndebench.platform.spec.extensions import extension_warnings

    check_models_build(spec)
    return tpe_warnings(spec) + extension_warnings(spec)


def tracking_uri(uri: str | None = None) -> str:
    """The MLflow tracking URI the API uses: ``uri`` made absolute (``sqlite:///rel.db`` against the current
    directory), or by default ``sqlite:///<cwd>/mlflow.db``, as on the command line."""
    from ndebench.platform.record.tracking import absolute_uri, default_tracking_uri

    return absolute_uri(uri) if uri else default_tracking_uri()


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns: the ``study`` name, the ``tracking_uri`` it was recorded in, the sweep's
    ``outcome`` (evaluate trials run and reused, failed cells with their first error, Ray's log file) and
    ``runs``, the study's results frame (:func:`results`)."""

    study: str
    tracking_uri: str
    outcome: SweepOutcome
    runs: pd.DataFrame


def run(spec: SweepSpec, *, uri: str | None = None, storage_path: str | Path = "ray_results",
        address: str | None = None, resume: bool = False, data_dir: str | None = None,
        verbose: bool = False, retry_diverged: bool = False, single_node: bool = False,
        progress_every_s: float = 60.0) -> RunResult:
    """Run the sweep as ``ndebench run`` does, without the report: build-check the models, then :func:`sweep`
    (a local Ray, or the cluster at ``address``) records every trial in MLflow at ``uri`` (default
    :func:`tracking_uri`). ``resume`` continues a study (failed and unfinished cells, and every planned
    (cell, seed) without an ok run, run again; ``retry_diverged`` also reruns diverged ones); ``storage_path``
    holds Ray's results (a path or an ``s3://``-style URI); ``data_dir`` overrides the spec's; ``address``
    defaults to ``$RAY_ADDRESS``, and ``single_node`` lets a joined one-machine cluster use sqlite. A failed
    cell does not raise: it is in ``outcome.failed``."""
    from ndebench.platform.spec.buildcheck import check_models_build

    check_models_build(spec)
    uri = tracking_uri(uri)
    outcome = sweep(spec, uri=uri, storage_path=storage_path, address=address, resume=resume, data_dir=data_dir,
                    verbose=verbose, retry_diverged=retry_diverged, single_node=single_node,
                    progress_every_s=progress_every_s)
    return RunResult(spec.study, uri, outcome, results(spec.study, uri))


def sweep(spec: SweepSpec, *, uri: str | None = None, storage_path: str | Path = "ray_results",
          address: str | None = None, resume: bool = False, data_dir: str | None = None, verbose: bool = False,
          retry_diverged: bool = False, single_node: bool = False, progress_every_s: float = 60.0) -> SweepOutcome:
    """The sweep of :func:`run` on a spec already checked (:func:`validate`):
    :class:`~ndebench.platform.engine.sweep.Sweep`, its cell runs closed with the report's statistics
    (:func:`~ndebench.platform.report.cellstats.cell_statistics`)."""
    from ndebench.platform.engine.sweep import Sweep

    return Sweep(spec, tracking_uri=tracking_uri(uri), storage_path=storage_path, address=address, resume=resume,
                 data_dir=data_dir, verbose=verbose, retry_diverged=retry_diverged,
                 cell_statistics=_cell_statistics, single_node=single_node, progress_every_s=progress_every_s).run()


def _cell_statistics(runs: pd.DataFrame, cells: list[tuple[str, str, str]],
                     test: str) -> dict[tuple[str, str, str], dict[str, float]]:
    # The report wing (scipy, statsmodels, matplotlib) loads when the evaluate stage ends, not as the sweep starts.
    from ndebench.platform.report.cellstats import cell_statistics

    return cell_statistics(runs, cells, test)


def _require_study(uri: str, study: str) -> None:
    """``ValueError`` naming the studies at ``uri`` when ``study`` is not one of them."""
    from ndebench.platform.record.tracking import study_names

    studies = study_names(uri)
    if study not in studies:
        raise ValueError(f"study {study!r} is not in {uri}; studies there: {', '.join(studies) or 'none'}")


def results(study: str, uri: str | None = None) -> pd.DataFrame:
    """The results frame of ``study`` in MLflow at ``uri`` (default :func:`tracking_uri`): one row per
    evaluate-phase trial run (sorted by model, dataset, regularizer and seed), what ``ndebench report`` tabulates.

    Columns: ``run_id, study, model, dataset, regularizer`` (the variant label, e.g.
    ``continuum_dropout[p=0.3,m=50]``, for runs of fixed-parameter variant cells), ``variant, label, seed,
    status`` (``ok``, ``diverged``, ``error``, ``running``, ``stopped``), ``message, config_hash,
    test_protocol, metric`` (the dataset's primary metric), ``n_mc, p, m, rate`` (the regularizer's
    parameters, NaN where absent), the ``test_*`` metrics, ``calibration`` (reliability bins of ``ok``
    runs), ``parent_run_id`` and ``params.<key>`` (the run's flat config, one column per key, e.g.
    ``params.training.lr``, values parsed back from strings; missing where a run lacks the key). Raises
    ``ValueError`` when the study is not in the tracking store."""
    from ndebench.platform.record.runs import evaluate_runs, recorded, runs_frame
    from ndebench.platform.report.analyses import label_variants

    uri = tracking_uri(uri)
    _require_study(uri, study)
    found = recorded(uri, study)
    frame = runs_frame(uri, study, histories=False, runs=found)
    runs = label_variants(evaluate_runs(uri, study, variants=True, runs=found), frame)
    if runs.empty or frame.empty:
        return runs
    extra = ["run_id", *(c for c in frame.columns if c not in runs.columns and c != "params")]
    merged = runs.merge(_flat_params(frame)[extra + _param_columns(frame)], on="run_id", how="left")
    return merged.sort_values(["model", "dataset", "regularizer", "seed"], kind="stable", ignore_index=True)


def _flat_params(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its ``params`` dicts spread into ``params.<key>`` columns (as ``mlflow.search_runs``)."""
    params = pd.DataFrame(list(frame["params"]), index=frame.index).add_prefix("params.")
    return pd.concat([frame.drop(columns="params"), params[sorted(params.columns)]], axis=1)


def _param_columns(frame: pd.DataFrame) -> list[str]:
    return sorted({f"params.{key}" for params in frame["params"] for key in params})


def studies(uri: str | None = None) -> pd.DataFrame:
    """The studies (MLflow experiments) at ``uri`` (default :func:`tracking_uri`), one row each, sorted by name:
    ``study``, ``experiment_id``, ``created`` and ``updated`` (UTC timestamps). Empty where there is none."""
    from ndebench.platform.record.tracking import client, study_names

    uri = tracking_uri(uri)
    rows = []
    for name in study_names(uri):
        experiment = client(uri).get_experiment_by_name(name)
        rows.append({"study": name, "experiment_id": experiment.experiment_id,
                     "created": pd.to_datetime(experiment.creation_time, unit="ms", utc=True),
                     "updated": pd.to_datetime(experiment.last_update_time, unit="ms", utc=True)})
    return pd.DataFrame(rows, columns=["study", "experiment_id", "created", "updated"])


SEARCH_PHASES = ("base", "tune")


def trials(study: str, phase: str = "tune", uri: str | None = None) -> pd.DataFrame:
    """The search trials of ``study``'s stage ``phase`` (``base``: the shared base search, ``tune``: the
    per-cell search) at ``uri``: one row per trial run (not the cell runs), oldest first.

    Columns: ``run_id``, ``cell_run_id`` (the cell run above it), ``cell, model, dataset, regularizer``,
    ``seed`` (int), ``status``, ``start_time`` (UTC), the validation metrics the trial reported to Ray Tune
    (``val_*``: its selected epoch's values, where recorded, else the last epoch's) and ``params.<key>`` (its
    sampled and fixed config). ``ValueError`` for an unknown phase or study."""
    from ndebench.platform.record.runs import parse_param
    from ndebench.platform.record.schema import TAG
    from ndebench.platform.record.searchtrials import RESULT_PREFIX
    from ndebench.platform.record.tracking import run_status, search

    if phase not in SEARCH_PHASES:
        raise ValueError(f"unknown search phase {phase!r}; valid: {', '.join(SEARCH_PHASES)}")
    uri = tracking_uri(uri)
    _require_study(uri, study)
    rows = []
    for run in search(uri, study, f"tags.`{TAG}phase` = '{phase}' and tags.`{TAG}kind` = 'trial'"):
        tags, metrics = run.data.tags, run.data.metrics
        chosen = {k[len(RESULT_PREFIX):]: v for k, v in metrics.items() if k.startswith(f"{RESULT_PREFIX}val_")}
        rows.append({"run_id": run.info.run_id, "cell_run_id": tags.get("mlflow.parentRunId", ""),
                     **{key: tags.get(f"{TAG}{key}", "") for key in ("cell", "model", "dataset", "regularizer")},
                     "seed": int(tags.get(f"{TAG}seed", "0") or 0), "status": run_status(run),
                     "start_time": pd.to_datetime(run.info.start_time, unit="ms", utc=True),
                     **{k: v for k, v in sorted(metrics.items()) if k.startswith("val_")}, **chosen,
                     "params": {k: parse_param(v) for k, v in run.data.params.items()}})
    if not rows:
        return pd.DataFrame(columns=["run_id", "cell_run_id", "cell", "model", "dataset", "regularizer", "seed",
                                     "status", "start_time"])
    return _flat_params(pd.DataFrame(rows)).sort_values("start_time", kind="stable", ignore_index=True)


def figures(runs: pd.DataFrame, metric: str | None = None) -> dict[str, Figure]:
    """The report's per-pair figures of a results frame (:func:`results`) as matplotlib figures, keyed as
    their files are named: ``reliability_<model>_<dataset>`` (the pooled calibration bins of each
    regularizer, :func:`~ndebench.platform.report.render.figures.reliability_figure`; only where runs carry bins)
    and ``seeds_<model>_<dataset>`` (the primary ``metric``, default each dataset's, one point per seed,
    :func:`~ndebench.platform.report.render.figures.seed_figure`). Show one with ``display(figs[key])``."""
    from ndebench.platform.report.render import figures as drawn
    from ndebench.platform.report.render.studyfigures import pair_figure_inputs, slug
    from ndebench.platform.report.report import with_primary_metrics

    runs, primary = with_primary_metrics(runs, metric)
    out: dict[str, Figure] = {}
    for model, dataset, reliability, seeds in pair_figure_inputs(runs, primary):
        if reliability:
            out[f"reliability_{slug(model, dataset)}"] = drawn.reliability_figure(*reliability)
        out[f"seeds_{slug(model, dataset)}"] = drawn.seed_figure(*seeds)
    return out


@dataclasses.dataclass(frozen=True)
class StudyLinks:
    """What :func:`study_links` returns: ``runs``, the UI's table of the study's evaluate cell runs
    (``cell_run_ids``) with the primary metric's mean, its difference to ``none``, the difference's 95% interval
    and p-value and the chosen hyperparameters as columns, best mean first; ``compare``, the same cells' charts
    (the primary mean, the difference to ``none``, and a parallel-coordinates plot of the params every cell
    has against the primary mean)."""

    runs: str
    compare: str
    cell_run_ids: tuple[str, ...]


def study_links(study: str, uri: str | None = None, ui_url: str = "http://127.0.0.1:5000") -> StudyLinks:
    """The MLflow UI links of ``study`` at ``uri`` (default :func:`tracking_uri`) for a UI served at ``ui_url``
    (``ndebench ui --study``), through the shared view it writes on the study's experiment
    (:func:`~ndebench.platform.record.uiview.share_study_view`). ``ValueError`` when the study is not in the
    tracking store."""
    from ndebench.platform.record.uiview import share_study_view, view_url

    uri = tracking_uri(uri)
    _require_study(uri, study)
    experiment_id, run_ids = share_study_view(uri, study)
    return StudyLinks(view_url(ui_url, experiment_id), view_url(ui_url, experiment_id, "CHART"), run_ids)


def reevaluate(study: str, n_mc: Sequence[int], uri: str | None = None, *, data_dir: str | None = None,
               log: Callable[[str], None] = print) -> list[str]:
    """``ndebench reevaluate``: each ``ok`` evaluate run of ``study`` with a Monte-Carlo test protocol evaluated
    again at every ``n_mc`` from its logged weights (:func:`~ndebench.platform.engine.reevaluate.reevaluate`);
    returns the new reevaluate runs' ids, which :func:`report` turns into the MC-samples table."""
    from ndebench.platform.engine.reevaluate import reevaluate as run_again

    return run_again(tracking_uri(uri), study, n_mc, log=log, data_dir=data_dir)


@dataclasses.dataclass(frozen=True)
class Report:
    """What :func:`report` returns: the written ``files`` (``files.directory``, ``files.paths``), the
    Markdown (``table.md``) and LaTeX (``table.tex``) text of the tables, the ``console`` summary that
    ``ndebench report`` prints (per cell n, mean, std and the test against ``none``), and ``paths``, every file
    written (the analyses and ``report.html`` too, when reported from a tracking store)."""

    files: ReportFiles
    markdown: str
    latex: str
    console: str
    paths: tuple[Path, ...] = ()


def report(runs: pd.DataFrame, out_dir: str | Path = "reports", study: str | None = None, *,
           test: str = "student", alpha: float = 0.05, correction: str = "none", metric: str | None = None,
           planned_seeds: list[int] | None = None, curves: pd.DataFrame | None = None, uri: str | None = None,
           frame: pd.DataFrame | None = None, failed: Mapping[str, str] | None = None,
           figures: str = "auto", left_out: list[dict[str, Any]] | None = None, paper: bool = False,
           protocol: dict[str, str] | None = None, changed: list[dict[str, Any]] | None = None) -> Report:
    """The report of ``study`` (default: the one study in ``runs["study"]``) from a results frame
    (:func:`results`, or any frame with its columns ``model, dataset, regularizer, seed, status`` and
    ``test_*``), written to ``out_dir/<study>/`` by :func:`~ndebench.platform.report.report.build_report` (see it
    for the statistics: mean (sample std) over seeds, two-sided ``test`` against ``none`` at ``alpha`` with
    ``correction``, the primary ``metric`` of each dataset unless one is given; cells name the
    ``planned_seeds`` without a run, default every seed recorded; cells that did not learn are flagged, and
    ``curves``, e.g. ``learning.read_curves(tracking.client(uri), list(runs.run_id))``, adds the learning-curve
    figures; ``figures`` (``auto``, ``all``, ``summary``, ``none``) chooses which figures are drawn,
    :mod:`~ndebench.platform.report.render.drawing`).

    With ``uri``, the tracking store the runs are in, it is everything ``ndebench report`` does: the planned seeds
    and (unless given) the learning curves read from there, of one seed per cell of the pairs whose figures are
    drawn (:func:`~ndebench.platform.report.learning.curve_runs`), a section on the ``failed`` cells
    (label -> first error) and of the finished runs left out as duplicates in ``table.md``, the paper's further
    analyses and ``report.html`` from ``frame`` (default :func:`~ndebench.platform.record.runs.runs_frame` of the
    study), and every file logged as an artifact of the study's MLflow run; ``left_out``
    (:func:`~ndebench.platform.record.completeness.left_out_finished`) and ``changed``
    (:func:`~ndebench.platform.report.integrity.changed_runs`) spare reading the study's runs again.
    ``paper``: the study beside the Continuum Dropout paper's reported numbers
    (:mod:`~ndebench.platform.report.paper.comparison`), in ``table.md``, ``report.html`` and ``summary.json``;
    ``protocol`` (:func:`~ndebench.platform.report.protocol.protocol_note`, read from the study run with ``uri``)
    says which protocol produced the rows."""
    from ndebench.platform.report.report import build_report, format_console_table

    if study is None:
        names = sorted(set(runs["study"])) if "study" in runs.columns else []
        if len(names) != 1:
            raise ValueError(f"name the study to report; the runs hold {names or 'no study column'}")
        study = names[0]
    if uri is not None:
        from ndebench.platform.record.completeness import left_out_finished
        from ndebench.platform.record.runs import planned_seeds as planned
        from ndebench.platform.record.tracking import client
        from ndebench.platform.report.integrity import study_changes
        from ndebench.platform.report.learning import curve_runs, learning_check, read_curves
        from ndebench.platform.report.render.drawing import figure_mode, pair_count

        planned_seeds = planned(uri, study) if planned_seeds is None else planned_seeds
        mode, _ = figure_mode(figures, pair_count(runs))
        if curves is None and mode != "none":
            chosen = curve_runs(runs, learning_check(runs), flagged_only=mode == "summary")
            curves = read_curves(client(uri), chosen)
        left_out = left_out_finished(uri, study) if left_out is None else left_out
        changed = study_changes(uri, study) if changed is None else changed
        protocol = _study_protocol(uri, study) if protocol is None else protocol
    files = build_report(runs, Path(out_dir), study, metric=metric, test=test, alpha=alpha,
                         correction=correction, planned_seeds=planned_seeds, curves=curves, left_out=left_out,
                         figures=figures, paper=paper, protocol=protocol, changed=changed)
    mine = runs[runs["study"] == study] if "study" in runs.columns else runs
    console = format_console_table(mine, metric=metric, test=test, alpha=alpha, correction=correction,
                                   table=files.tables[0] if files.tables else None)
    if failed:
        lines = ["", "## Failed cells", "", "| cell | first error |", "|---|---|"]
        lines += [f"| {label} | {message.replace('|', '/')} |" for label, message in failed.items()]
        with files.table_md.open("a") as handle:
            handle.write("\n".join(lines) + "\n")
    paths = list(files.paths)
    if uri is not None:
        paths += _analyses(runs, files, study, uri, frame, alpha)
    return Report(files, files.table_md.read_text(), files.table_tex.read_text(), console, tuple(paths))


def _study_protocol(uri: str, study: str) -> dict[str, str] | None:
    """The protocol settings of the study run (``ndebench.kind=study``), None when there is none."""
    from ndebench.platform.record.tracking import search
    from ndebench.platform.report.protocol import protocol_note

    found = search(uri, study, "tags.`ndebench.kind` = 'study'")
    return protocol_note(found[0].data.params) if found else None


def _analyses(runs: pd.DataFrame, files: ReportFiles, study: str, uri: str, frame: pd.DataFrame | None,
              alpha: float) -> list[Path]:
    """The further analyses and ``report.html`` (when any run has results), then every file logged to MLflow."""
    from ndebench.platform.record.runs import runs_frame
    from ndebench.platform.record.tracking import client, log_report_artifacts
    from ndebench.platform.report.analyses import write_analyses
    from ndebench.platform.report.report import has_results

    paths: list[Path] = []
    if has_results(runs):
        experiment = client(uri).get_experiment_by_name(study)
        paths += write_analyses(
            runs_frame(uri, study) if frame is None else frame, runs, files, study, alpha=alpha,
            reevaluated=runs_frame(uri, study, "reevaluate", histories=False),
            experiment_id=experiment.experiment_id if experiment else None, **report_ui(uri))
    log_report_artifacts(uri, study, [*files.paths, *paths])
    return paths


def report_ui(uri: str) -> dict[str, str]:
    """Where ``report.html`` links a run to: the tracking server at an ``http(s)`` ``uri`` serves the UI itself;
    any other store (sqlite) is served by ``ndebench ui --tracking-uri <uri>``, at its default address, which a
    note in the report says. ``{"ui_url": ..., "ui_note": ...}``."""
    if uri.startswith(("http://", "https://")):
        return {"ui_url": uri.rstrip("/"), "ui_note": ""}
    return {"ui_url": "http://127.0.0.1:5000",
            "ui_note": f"start that UI with `ndebench ui --tracking-uri {uri}` (its default address)"}


def study_report_settings(study: str, uri: str | None = None, **given: Any) -> dict[str, Any]:
    """The ``test``, ``alpha``, ``correction`` and ``figures`` a report of ``study`` uses: each ``given`` value
    that is not ``None``, else the ``report:`` section of the sweep YAML the study recorded (with its ``--set``
    overrides), else the defaults; so a later report has the markers and figures of the sweep's own. The
    recorded YAML is read only when a value is missing (``ndebench run`` and ``ndebench report`` pass all four)."""
    from ndebench.platform.record.tracking import study_yaml
    from ndebench.platform.spec.recorded import recorded_report, report_settings

    uri = tracking_uri(uri)
    _require_study(uri, study)
    if all(value is not None for value in given.values()):
        return dict(given)
    return report_settings(recorded_report(study_yaml(uri, study)), **given)


def report_study(study: str, uri: str | None = None, out_dir: str | Path = "reports", *, test: str | None = None,
                 alpha: float | None = None, correction: str | None = None,
                 failed: Mapping[str, str] | None = None, figures: str | None = None,
                 paper: bool = False) -> Report | None:
    """``ndebench report --study``: the study's evaluate runs read from ``uri`` (default :func:`tracking_uri`),
    variant runs labelled, reported by :func:`report` with everything the command writes; ``test``, ``alpha``,
    ``correction`` and ``figures`` left ``None`` come from the study's recorded config
    (:func:`study_report_settings`). ``None`` when no evaluate run finished and cells ``failed``; ``ValueError``
    when the study or its evaluate runs are missing."""
    from ndebench.platform.record.completeness import left_out_finished
    from ndebench.platform.record.runs import evaluate_runs, recorded, runs_frame
    from ndebench.platform.report.analyses import label_variants
    from ndebench.platform.report.integrity import changed_runs

    uri = tracking_uri(uri)
    settings = study_report_settings(study, uri, test=test, alpha=alpha, correction=correction, figures=figures)
    test, alpha, correction, figures = (settings[k] for k in ("test", "alpha", "correction", "figures"))
    found = recorded(uri, study)
    runs = evaluate_runs(uri, study, variants=True, runs=found)
    if runs.empty and failed:
        return None
    if runs.empty:
        raise ValueError(f"study {study!r} has no evaluate-phase runs in {uri}; run the sweep first")
    frame = runs_frame(uri, study, runs=found)
    left_out, changed = left_out_finished(uri, study, found), changed_runs(found)
    # Millions of MLflow entities would make every later garbage collection (statsmodels runs some) slow.
    del found
    return report(label_variants(runs, frame), out_dir, study, test=test, alpha=alpha, correction=correction,
                  uri=uri, frame=frame, failed=failed, figures=figures, left_out=left_out, paper=paper,
                  changed=changed)


def verify(study: str, uri: str | None = None, fingerprint: str | None = None) -> Any:
    """``ndebench verify``: :func:`~ndebench.platform.report.integrity.verify_study` (``.ok``: nothing changed)."""
    from ndebench.platform.report.integrity import verify_study

    _require_study(uri := tracking_uri(uri), study)
    return verify_study(uri, study, fingerprint)
