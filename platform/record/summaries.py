"""What a trial run carries as final metrics so that readers need only paged ``search_runs``.

Calibration bins (:func:`~ndebench.platform.common.metrics.calibration_bins`, also kept as the ``calibration.json``
artifact for people) are one tag, ``ndebench.calibration``: the bins as compact JSON (floats written exactly),
so ``search_runs`` returns them with the run and the UI's metric list keeps to the metrics people read (the
summary is ``test_ece``). Runs recorded between the artifact-only layout and this one carry them as metrics
``calibration.n_bins``, ``calibration.count.<i>``, ``calibration.confidence_sum.<i>`` and
``calibration.correct_sum.<i>``; :func:`calibration_from_run` reads both.

The per-epoch ``train_time_s`` and ``epoch_time_s`` are summarized as ``mean_train_time_s`` and
``mean_epoch_time_s``: the mean over the run's epochs in step order, computed by :func:`mean_over_epochs` here
and in the readers' fallback for older runs alike.

As the run ends, what readers make of it is summarized by its digest (tag ``ndebench.results_digest``,
:func:`record_digest`): its result metrics (``test_*``), the tags that decide its cell, seed, phase, kind,
status and lease (:data:`~ndebench.platform.record.schema.DIGEST_TAGS`) and its params. A reader holding the run
from ``search_runs`` tells a result or tag changed after the run ended from what it recorded without another
request (``ndebench.platform.report.integrity``). Runs recorded before this release carry the older digest
(:func:`results_digest`, without the ``v2`` mark), of their result metrics only.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from ndebench.platform.record.schema import DIGEST_TAGS, PLANNED_HASHES, PLANNED_SEEDS, TAG

CALIBRATION = "calibration."
CALIBRATION_TAG = "calibration"
BIN_KEYS = ("count", "confidence_sum", "correct_sum")
TIME_METRICS = ("train_time_s", "epoch_time_s")
MEAN_PREFIX = "mean_"
RESULTS_DIGEST = "results_digest"
RESULT_METRICS = "test_"
DIGEST_VERSION = "v2"
# Set on a run a trial continues, until it ends: no digest to hold it to while it runs.
UNFINISHED = "unfinished"


def calibration_tags(bins: Mapping[str, Any]) -> dict[str, str]:
    """Calibration bins as the final tag ``calibration`` (``ndebench.calibration`` once recorded)."""
    return {CALIBRATION_TAG: json.dumps(
        {"n_bins": int(bins["n_bins"]), **{key: list(bins[key]) for key in BIN_KEYS}}, separators=(",", ":"))}


def calibration_from_run(metrics: Mapping[str, float], tags: Mapping[str, str]) -> dict[str, Any] | None:
    """The calibration bins a run carries (as in ``calibration.json``: integer counts, float sums): its tag
    ``ndebench.calibration``, else its ``calibration.*`` metrics; ``None`` for a run recorded with neither."""
    raw = tags.get(f"{TAG}{CALIBRATION_TAG}")
    if raw:
        try:
            return json.loads(raw)
        except ValueError:
            return None
    return calibration_from_metrics(metrics)


def calibration_from_metrics(metrics: Mapping[str, float]) -> dict[str, Any] | None:
    """The calibration bins a run logged as ``calibration.*`` metrics, ``None`` for a run without them."""
    n_bins = metrics.get(f"{CALIBRATION}n_bins")
    if n_bins is None:
        return None
    n = int(n_bins)
    try:
        sums = {key: [metrics[f"{CALIBRATION}{key}.{i}"] for i in range(n)] for key in BIN_KEYS}
    except KeyError:
        return None
    return {"n_bins": n, "count": [int(c) for c in sums["count"]],
            "confidence_sum": sums["confidence_sum"], "correct_sum": sums["correct_sum"]}


def mean_over_epochs(values: Sequence[float]) -> float:
    """The mean of per-epoch values in step order; NaN without any."""
    return float(np.mean(values)) if len(values) else math.nan


def time_summaries(per_epoch: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """``mean_<key>`` for each of :data:`TIME_METRICS` with values in ``per_epoch`` (key -> values by step)."""
    return {f"{MEAN_PREFIX}{key}": mean_over_epochs(per_epoch[key]) for key in TIME_METRICS if per_epoch.get(key)}


def _stored(value: float) -> str:
    """A metric value as MLflow's SQL store returns it: NaN kept, +-inf as the largest finite float."""
    value = float(value)
    if math.isinf(value):
        value = math.copysign(sys.float_info.max, value)
    return repr(value)


def results_digest(metrics: Mapping[str, float | None]) -> str:
    """``"<n> <sha256 prefix>"`` over a run's ``n`` result metrics (``test_*``: what the tables read), each as
    ``key=value`` with its value as the store keeps it; the final tag ``results_digest``."""
    lines = sorted(f"{k}={_stored(v)}" for k, v in metrics.items() if k.startswith(RESULT_METRICS) and v is not None)
    return f"{len(lines)} {hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:32]}"


def record_digest(metrics: Mapping[str, float | None], tags: Mapping[str, str], params: Mapping[str, str]) -> str:
    """``"v2 <n> <results> <record>"``: a run's ``n`` result metrics (values as in :func:`results_digest`) and
    the SHA-256 prefixes of them and of its :data:`~ndebench.platform.record.schema.DIGEST_TAGS` present in
    ``tags`` with all its ``params`` (values as the store returns them), each a JSON list of sorted pairs; the
    final tag ``results_digest``."""
    results = sorted((k, _stored(v)) for k, v in metrics.items() if k.startswith(RESULT_METRICS) and v is not None)
    record = [sorted((k, tags[k]) for k in DIGEST_TAGS if k in tags), sorted(params.items())]
    return f"{DIGEST_VERSION} {len(results)} {_sha(results)} {_sha(record)}"


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def digest_of(run: Any) -> str:
    """:func:`record_digest` of a run as ``search_runs`` or ``get_run`` returns it."""
    return record_digest(run.data.metrics, run.data.tags, run.data.params)


def text_sha(text: str | None) -> str:
    """The SHA-256 of a recorded text file (``"none"`` without one): the study run's param
    :data:`~ndebench.platform.record.schema.SWEEP_SHA`."""
    return "none" if text is None else hashlib.sha256(text.encode()).hexdigest()


def plan_digest(runs: Sequence[Any]) -> str:
    """``"v1 <sha256 prefix>"`` over what decides which runs count (``record.completeness``): each evaluate cell
    run's id, cell key and ``ndebench.planned_hashes``, and the study run's ``ndebench.evaluate_seeds``, among
    ``runs`` (the study's cell and study runs, as ``search_runs`` returns them); the study run's tag
    ``ndebench.plan_digest``."""
    cells = sorted((r.info.run_id, r.data.tags.get(f"{TAG}cell", ""), r.data.tags[PLANNED_HASHES]) for r in runs
                   if r.data.tags.get(f"{TAG}kind") == "cell" and r.data.tags.get(f"{TAG}phase") == "evaluate"
                   and PLANNED_HASHES in r.data.tags)
    seeds = sorted(r.data.tags.get(PLANNED_SEEDS, "") for r in runs if r.data.tags.get(f"{TAG}kind") == "study")
    return f"v1 {_sha([cells, seeds])}"

