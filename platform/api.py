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
:mod:`~ndebench.platform.record.runs`, :mod:`~ndebench.platform.report.study`, one study's report end to
end); errors are the ones the command line prints
(:class:`~ndebench.platform.spec.config.ConfigError` and ``ValueError`` naming the bad value).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from ndebench.platform.engine.sweep import SweepOutcome
from ndebench.platform.spec.config import SweepSpec, apply_overrides, load_spec, parse_spec

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from ndebench.platform.engine.runchecks import RunExit
    from ndebench.platform.report.study import Report


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
    from ndebench.platform.record.store import tracking_uri as resolved

    return resolved(uri)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns: the ``study`` name, the ``tracking_uri`` it was recorded in, the sweep's
    ``outcome`` (evaluate trials run and reused, failed cells with their first error, Ray's log file), ``exit``,
    the exit status ``ndebench run`` would return with its reasons
    (:class:`~ndebench.platform.engine.runchecks.RunExit`), the ``report`` written (with ``out_dir``) and
    :attr:`runs`."""

    study: str
    tracking_uri: str
    outcome: SweepOutcome
    exit: RunExit
    report: Report | None = None

    @functools.cached_property
    def runs(self) -> pd.DataFrame:
        """The study's results frame (:func:`results`), read at first use."""
        return results(self.study, self.tracking_uri)


def run(spec: SweepSpec, *, uri: str | None = None, out_dir: str | Path | None = None,
        storage_path: str | Path = "ray_results", address: str | None = None, resume: bool = False,
        data_dir: str | None = None, verbose: bool = False, retry_diverged: bool = False, single_node: bool = False,
        progress_every_s: float = 60.0, on_step: Callable[..., None] | None = None) -> RunResult:
    """``ndebench run`` without the printing: build-check the models (:func:`validate`), check the tracking URI
    (default :func:`tracking_uri`), that its store answers and that ``out_dir`` can be written, all before Ray
    starts, then :func:`sweep` (a local Ray, or the cluster at ``address``; SIGTERM and SIGHUP stop it as Ctrl-C
    does) records every trial in MLflow; with ``out_dir``, the study's report (:func:`report_study` with the spec's
    ``report:`` settings and the failed cells).
    ``resume`` continues a study (failed and unfinished cells, and every planned (cell, seed) without an ok run,
    run again; ``retry_diverged`` also reruns diverged ones); ``storage_path`` holds Ray's results (a path or an
    ``s3://``-style URI); ``data_dir`` overrides the spec's; ``address`` defaults to ``$RAY_ADDRESS``, and
    ``single_node`` lets a joined one-machine cluster use sqlite. A failed cell does not raise: it is in
    ``outcome.failed`` and ``exit``, as is a full disk that stopped the report; a bad value raises ``ValueError``,
    an unreachable store ``InfrastructureError``, a full disk during the sweep ``DiskFullError`` (after the report
    of what was recorded, where the disk allows one) and an interruption ``KeyboardInterrupt``.

    ``on_step(step, **facts)``, where given, hears each step as it ends (``ndebench run`` prints them):
    ``"checked"`` (``uri``, ``warnings``: :func:`validate`'s), ``"swept"`` (``outcome``), ``"reported"``
    (``report``, ``None`` when no evaluate run finished), ``"report stopped"`` (``message``: the full disk) and
    ``"no report"`` (``error``: why a full disk's sweep left no report)."""
    from ndebench.platform.engine.runchecks import check_out_dir, check_tracking_reachable, check_tracking_uri, run_exit
    from ndebench.platform.failures.diskfull import DiskFullError

    say = on_step or (lambda step, **facts: None)
    warnings = validate(spec)
    uri = tracking_uri(uri)
    check_tracking_uri(uri)
    check_tracking_reachable(uri)
    if out_dir is not None:
        check_out_dir(out_dir)
    say("checked", uri=uri, warnings=warnings)
    try:
        with _stopped_by_signals():
            outcome = sweep(spec, uri=uri, storage_path=storage_path, address=address, resume=resume,
                            data_dir=data_dir, verbose=verbose, retry_diverged=retry_diverged,
                            single_node=single_node, progress_every_s=progress_every_s)
    except DiskFullError:
        if out_dir is not None:
            try:
                _report_unless_full(spec, uri, out_dir, {}, say)
            except Exception as exc:  # noqa: BLE001 - the full disk is what the caller hears
                say("no report", error=exc)
        raise
    say("swept", outcome=outcome)
    full = [outcome.infrastructure] if outcome.infrastructure else []
    written = None
    if out_dir is not None:
        written, stopped = _report_unless_full(spec, uri, out_dir, outcome.failed, say)
        full += [stopped] if stopped else []
    return RunResult(spec.study, uri, outcome, run_exit(spec, uri, outcome.failed, full), written)


def _stopped_by_signals() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` within the block where this is the main thread (only it can
    set signal handlers), so that a stopped sweep records its trials as interrupted."""
    from ndebench.platform.failures.stopping import stop_on_signals

    return stop_on_signals() if threading.current_thread() is threading.main_thread() else contextlib.nullcontext()


def _report_unless_full(spec: SweepSpec, uri: str, out_dir: str | Path, failed: dict[str, str],
                        say: Callable[..., None]) -> tuple[Report | None, str | None]:
    """:func:`run`'s report and ``None``; where a full disk stops it, ``None`` and what is full (the files written
    so far stay)."""
    from ndebench.platform.failures.diskfull import disk_full, is_disk_full

    try:
        written = report_study(spec.study, uri, out_dir, test=spec.report.test, alpha=spec.report.alpha,
                               correction=spec.report.correction, failed=failed, figures=spec.report.figures)
    except Exception as exc:  # noqa: BLE001 - only a full disk is handled here; anything else propagates
        if not is_disk_full(exc):
            raise
        message = str(disk_full(exc, str(Path(out_dir).resolve())))
        say("report stopped", message=message)
        return None, message
    say("reported", report=written)
    return written, None


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


def results(study: str, uri: str | None = None) -> pd.DataFrame:
    """The results frame of ``study`` in MLflow at ``uri`` (default :func:`tracking_uri`), what ``ndebench report``
    tabulates: :func:`~ndebench.platform.record.runs.study_frame`, one row per evaluate-phase trial run with the cell
    key as columns (``model, dataset, regularizer, variant, label, n_mc``), ``seed, status`` (``ok``,
    ``diverged``, ``error``, ``running``, ``stopped``), ``message, config_hash, test_protocol, metric`` (the
    dataset's primary metric), every numeric hyperparameter a registered regularizer declares, plugins included
    (:func:`~ndebench.platform.record.runs.regularizer_params`; ``p, m, rate, size, b, bins, decay`` for the
    built-ins; NaN where a run's regularizer has none), the ``test_*`` metrics, ``calibration`` (reliability
    bins of ``ok`` runs), ``parent_run_id`` and ``params.<key>`` (the run's flat config, e.g.
    ``params.training.lr``, values parsed back from strings). Raises ``ValueError`` when the
    study is not in the tracking store."""
    from ndebench.platform.record.runs import study_frame
    from ndebench.platform.record.tracking import require_study

    uri = tracking_uri(uri)
    require_study(uri, study)
    return study_frame(uri, study)


def studies(uri: str | None = None) -> pd.DataFrame:
    """The studies (MLflow experiments) at ``uri`` (default :func:`tracking_uri`), one row each, sorted by name:
    ``study``, ``experiment_id``, ``created`` and ``updated`` (UTC timestamps). Empty where there is none."""
    from ndebench.platform.record.store import client
    from ndebench.platform.record.tracking import study_names

    uri = tracking_uri(uri)
    rows = []
    for name in study_names(uri):
        experiment = client(uri).get_experiment_by_name(name)
        rows.append({"study": name, "experiment_id": experiment.experiment_id,
                     "created": pd.to_datetime(experiment.creation_time, unit="ms", utc=True),
                     "updated": pd.to_datetime(experiment.last_update_time, unit="ms", utc=True)})
    return pd.DataFrame(rows, columns=["study", "experiment_id", "created", "updated"])


def trials(study: str, phase: str = "tune", uri: str | None = None) -> pd.DataFrame:
    """The search trials of ``study``'s stage ``phase`` (``base``: the shared base search, ``tune``: the
    per-cell search) at ``uri`` (default :func:`tracking_uri`): one row per trial run, oldest first
    (:func:`~ndebench.platform.record.runs.trials_frame`, which names the columns). ``ValueError`` for an unknown
    phase or study."""
    from ndebench.platform.record.runs import trials_frame
    from ndebench.platform.record.tracking import require_study

    uri = tracking_uri(uri)
    require_study(uri, study)
    return trials_frame(uri, study, phase)


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
    from ndebench.platform.record.tracking import require_study
    from ndebench.platform.record.uiview import share_study_view, view_url

    uri = tracking_uri(uri)
    require_study(uri, study)
    experiment_id, run_ids = share_study_view(uri, study)
    return StudyLinks(view_url(ui_url, experiment_id), view_url(ui_url, experiment_id, "CHART"), run_ids)


def reevaluate(study: str, n_mc: Sequence[int], uri: str | None = None, *, data_dir: str | None = None,
               log: Callable[[str], None] = print) -> list[str]:
    """``ndebench reevaluate``: each ``ok`` evaluate run of ``study`` with a Monte-Carlo test protocol evaluated
    again at every ``n_mc`` from its logged weights (:func:`~ndebench.platform.engine.reevaluate.reevaluate`);
    returns the new reevaluate runs' ids, which :func:`report` turns into the MC-samples table."""
    from ndebench.platform.engine.reevaluate import reevaluate as run_again

    return run_again(tracking_uri(uri), study, n_mc, log=log, data_dir=data_dir)


def report(runs: pd.DataFrame, out_dir: str | Path = "reports", study: str | None = None, *,
           uri: str | None = None, failed: Mapping[str, str] | None = None, **settings: Any) -> Report:
    """The report of a results frame (:func:`results`) written to ``out_dir/<study>/``: tables as text and files
    (:func:`~ndebench.platform.report.study.report`); ``settings`` are those of
    :class:`~ndebench.platform.report.study.ReportSettings` (``test``, ``alpha``, ``correction``, ``metric``,
    ``figures``, ``paper``, ``protocol``), ``uri`` gives everything ``ndebench report`` writes and ``failed`` (cell
    label -> first error) the failed cells' section."""
    from ndebench.platform.report.study import ReportSettings
    from ndebench.platform.report.study import report as write

    return write(runs, out_dir, study, ReportSettings(**settings), uri=uri, failed=failed)


def study_report_settings(study: str, uri: str | None = None, **given: Any) -> dict[str, Any]:
    """The ``test``, ``alpha``, ``correction`` and ``figures`` a report of ``study`` uses: each ``given`` value
    that is not ``None``, else the ``report:`` section of the sweep YAML the study recorded (with its ``--set``
    overrides), else the defaults; so a later report has the markers and figures of the sweep's own. The
    recorded YAML is read only when a value is missing (``ndebench run`` and ``ndebench report`` pass all four)."""
    from ndebench.platform.record.tracking import require_study, study_yaml
    from ndebench.platform.spec.recorded import recorded_report, report_settings

    uri = tracking_uri(uri)
    require_study(uri, study)
    if all(value is not None for value in given.values()):
        return dict(given)
    return report_settings(recorded_report(study_yaml(uri, study)), **given)


def report_study(study: str, uri: str | None = None, out_dir: str | Path = "reports", *, test: str | None = None,
                 alpha: float | None = None, correction: str | None = None,
                 failed: Mapping[str, str] | None = None, figures: str | None = None,
                 paper: bool = False) -> Report | None:
    """``ndebench report --study``: :func:`~ndebench.platform.report.study.report_study` of the study at ``uri``
    (default :func:`tracking_uri`), with ``test``, ``alpha``, ``correction`` and ``figures`` left ``None`` taken
    from the study's recorded config (:func:`study_report_settings`). ``None`` when no evaluate run finished and
    cells ``failed``; ``ValueError`` when the study or its evaluate runs are missing."""
    from ndebench.platform.report.study import report_study as write

    uri = tracking_uri(uri)
    settings = study_report_settings(study, uri, test=test, alpha=alpha, correction=correction, figures=figures)
    return write(study, uri, out_dir, failed=failed, paper=paper, **settings)


def verify(study: str, uri: str | None = None, fingerprint: str | None = None) -> Any:
    """``ndebench verify``: :func:`~ndebench.platform.report.integrity.verify_study` (``.ok``: nothing changed)."""
    from ndebench.platform.record.tracking import require_study
    from ndebench.platform.report.integrity import verify_study

    require_study(uri := tracking_uri(uri), study)
    return verify_study(uri, study, fingerprint)
