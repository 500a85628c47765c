"""The MLflow UI view of a study's answer: its evaluate cells, primary metric, difference to ``none`` and interval.

MLflow 3.17's UI restores a whole experiment-page state from an experiment tag ``mlflow.sharedViewState.<key>``
(a JSON object) when a URL carries ``?viewStateShareKey=<key>``: the runs filter and sort (``searchFilter``,
``orderByKey``, ``orderByAsc``), the table's ``selectedColumns`` (``metrics.`name```, ``params.`name```,
``tags.`name```) and the chart view's charts (``compareRunCharts`` in ``compareRunSections``); the URL's
``compareRunsMode`` (``TABLE`` or ``CHART``) picks the view. :func:`share_study_view` writes that tag for a
study (one row per evaluate cell run, best primary mean first); the view opens on the runs page whatever the
experiment's default tab. MLflow's runs table prints a metric with every digit it has and has no setting to
round it, so the view leads with display copies: tags on each cell run holding the metrics at 3 significant
digits (:func:`display_tags`), the raw metrics after them. The chart view's parallel-coordinates plot gets the
params every cell run has whose value differs between cells (none when no param does), and the primary metric.
"""
from __future__ import annotations

import json
import urllib.parse
from collections import Counter
from typing import Any

from ndebench.platform.record.schema import TAG
from ndebench.platform.record.store import client
from ndebench.platform.record.tracking import cell_states

SHARED_VIEW = "mlflow.sharedViewState."
VIEW_KEY = "ndebench-evaluate-cells"
CELL_FILTER = f"tags.`{TAG}kind` = 'cell' and tags.`{TAG}phase` = 'evaluate'"
COMPARISON = ("diff_vs_none", "diff_ci_low", "diff_ci_high", "p_value_vs_none")
SECTION = "ndebench-answer"
# The side bar MLflow 3.17 shows (its `workflowType` URL parameter; it defaults to "genai").
MODEL_TRAINING = "machine_learning"


def _column(kind: str, name: str) -> str:
    return f"{kind}.`{name}`"


def primary_means(cells: list[Any]) -> list[str]:
    """The ``mean_test_<metric>`` keys of the cells' primary metrics (tag ``ndebench.metric``), the most used
    first; cells without the tag count by the ``mean_test_*`` metrics they carry."""
    counts: Counter[str] = Counter()
    for run in cells:
        metric = run.data.tags.get(f"{TAG}metric", "")
        keys = [f"mean_test_{metric}"] if metric else [k for k in run.data.metrics if k.startswith("mean_test_")]
        counts.update(k for k in keys if k in run.data.metrics)
    return [key for key, _ in counts.most_common()]


def _chart(uuid: str, kind: str, **config: Any) -> dict[str, Any]:
    return {"uuid": uuid, "type": kind, "metricSectionId": SECTION, "deleted": False, "isGenerated": False,
            **config}


def _shown(value: float | None, spec: str = "#.3g") -> str:
    """``value`` at 3 significant digits, trailing zeros kept (``0.700``), ``-`` for none."""
    return "-" if value is None else format(value, spec).removesuffix(".")


def display_tags(run: Any, means: list[str]) -> dict[str, str]:
    """What the first screen shows of a cell run, at 3 significant digits, each short enough for the table's
    column: per primary mean (``mean_test_<m>``) a tag ``<m>`` (``0.700``), then ``vs none`` (``diff_vs_none``,
    signed: ``+0.0667``), ``p vs none``, the 95% interval's ``CI low`` and ``CI high``, per primary metric its
    standard deviation over the seeds (``sd <m>``), and ``CI excludes 0`` (``yes``/``no``: whether the difference
    is significant at 5%, :func:`_excludes_zero`); ``-`` where the cell has no value (``none`` itself, a metric of
    another dataset). Names for people; the raw metrics stay the record."""
    metrics = run.data.metrics
    tags = {mean.removeprefix("mean_test_"): _shown(metrics.get(mean)) for mean in means}
    tags |= {"vs none": _shown(metrics.get("diff_vs_none"), "+#.3g"),
             "p vs none": _shown(metrics.get("p_value_vs_none")),
             "CI low": _shown(metrics.get("diff_ci_low")), "CI high": _shown(metrics.get("diff_ci_high"))}
    tags |= {f"sd {mean.removeprefix('mean_test_')}": _shown(metrics.get(mean.replace("mean_", "std_", 1)))
             for mean in means}
    return tags | {"CI excludes 0": _excludes_zero(metrics.get("diff_ci_low"), metrics.get("diff_ci_high"))}


def _excludes_zero(low: float | None, high: float | None) -> str:
    """``yes`` when the difference's 95% interval lies on one side of 0 (the test rejects at 5%), ``no`` when
    it holds 0, ``-`` without an interval: the significance column beside the difference."""
    if low is None or high is None or low != low or high != high:
        return "-"
    return "yes" if low > 0 or high < 0 else "no"


def varying_params(cells: list[Any]) -> list[str]:
    """The params every cell run has whose value is not the same in all of them: the axes worth a plot."""
    if not cells:
        return []
    shared = set.intersection(*(set(run.data.params) for run in cells))
    return sorted(k for k in shared if len({run.data.params[k] for run in cells}) > 1)


def study_view(cells: list[Any]) -> dict[str, Any]:
    """The shared view state of a study whose evaluate cell runs are ``cells``: those runs only, sorted by the
    primary mean (best first), with the display copies (:func:`display_tags`) first, then the raw primary mean,
    ``diff_vs_none``, its 95% interval and p-value, the regularizer and the chosen hyperparameters as columns;
    charts: the primary mean per cell, the difference to ``none``, and, where some param differs between the
    cells (:func:`varying_params`), a parallel-coordinates plot of those params against the primary mean."""
    means = primary_means(cells)
    params = sorted({k for run in cells for k in run.data.params})
    first = means[0] if means else "mean_test_accuracy"
    shown = list(display_tags(cells[0], means)) if cells else []
    columns = [*(_column("tags", t) for t in shown), *(_column("metrics", m) for m in [*means, *COMPARISON]),
               _column("tags", f"{TAG}regularizer"), *(_column("params", p) for p in params)]
    charts = [_chart("primary-mean", "BAR", metricKey=first),
              _chart("difference", "BAR", metricKey="diff_vs_none")]
    if varying := varying_params(cells):
        charts.append(_chart("parallel", "PARALLEL", selectedParams=varying, selectedMetrics=[first],
                             showAllRuns=True))
    return {
        "searchFilter": CELL_FILTER, "orderByKey": _column("metrics", first), "orderByAsc": False,
        "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
        "selectedColumns": columns, "columnOrder": columns,
        "runsHiddenMode": "SHOW_ALL", "hideEmptyCharts": True, "useGroupedValuesInCharts": False,
        "compareRunSections": [{"uuid": SECTION, "name": "ndebench: the answer", "display": True,
                                "isReordered": False, "deleted": False, "isGenerated": False}],
        "compareRunCharts": charts,
    }


def share_study_view(uri: str, study: str) -> tuple[str, tuple[str, ...]]:
    """Write the study's shared view (:func:`study_view` of its evaluate cell runs) as the experiment tag
    ``mlflow.sharedViewState.ndebench-evaluate-cells`` and each cell run's :func:`display_tags` (both rewritten
    each time, so they follow a resumed study); returns the experiment id and the cell run ids (by cell key)."""
    from mlflow.entities import RunTag

    states = cell_states(uri, study, "evaluate")
    cells = [states[key] for key in sorted(states)]
    mlflow_client = client(uri)
    means = primary_means(cells)
    for run in cells:
        mlflow_client.log_batch(run.info.run_id, tags=[RunTag(k, v) for k, v in display_tags(run, means).items()])
    experiment_id = mlflow_client.get_experiment_by_name(study).experiment_id
    mlflow_client.set_experiment_tag(experiment_id, f"{SHARED_VIEW}{VIEW_KEY}",
                                     json.dumps(study_view(cells), separators=(",", ":")))
    return experiment_id, tuple(run.info.run_id for run in cells)


def view_url(base_url: str, experiment_id: str, mode: str = "TABLE") -> str:
    """The UI page of the shared view: ``<base_url>/#/experiments/<id>/runs?viewStateShareKey=...`` in
    ``mode`` (``TABLE``: the cells' table, ``CHART``: their charts), with the side bar on model training
    (``workflowType``; MLflow 3.17 defaults to its GenAI pages)."""
    query = urllib.parse.urlencode({"viewStateShareKey": VIEW_KEY, "compareRunsMode": mode,
                                    "workflowType": MODEL_TRAINING})
    return f"{base_url}/#/experiments/{experiment_id}/runs?{query}"


def studies_url(base_url: str) -> str:
    """The UI's list of experiments (the studies), ``<base_url>/#/experiments``, with the side bar on model
    training: MLflow 3.17's root page is its GenAI welcome page."""
    return f"{base_url}/#/experiments?{urllib.parse.urlencode({'workflowType': MODEL_TRAINING})}"
