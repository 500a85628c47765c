"""Results changed after their run ended: what every report flags, and what ``ndebench verify`` finds.

MLflow keeps every value logged to a metric, reports read the latest, and anyone who may write a study can log
another (``log_metric(run, "test_accuracy", 0.96)``), which no non-admin can remove again. Two checks:

- *The report* (no request per run, so that a study of 20,000 runs reports as fast as before): each trial run
  records, as it ends, the digest of its result metrics (``ndebench.results_digest``,
  :func:`~ndebench.platform.record.summaries.results_digest`); the report recomputes it from the values
  ``search_runs`` already returned, and flags a run whose results differ: a rewrite after the run ended.
- ``ndebench verify`` (one request per result metric of each trial run): besides the digest, the full history of
  every ``test_*`` metric: one holding more than one value, or a value logged after its run ended. This also
  catches a rewrite that set a matching digest tag, and runs recorded before the digest existed.

Neither catches a change made in the database itself (an admin of the store), nor a run the worker never ended.
"""
from __future__ import annotations

from typing import Any

from ndebench.platform.record.schema import TAG
from ndebench.platform.record.summaries import RESULT_METRICS, RESULTS_DIGEST, results_digest
from ndebench.platform.record.tracking import client, search

LISTED = 50


def _flag(run: Any, metrics: list[str], why: str) -> dict[str, Any]:
    tags = run.data.tags
    return {"run_id": run.info.run_id, "phase": tags.get(f"{TAG}phase", ""), "cell": tags.get(f"{TAG}cell", ""),
            "seed": tags.get(f"{TAG}seed", ""), "metrics": metrics, "why": why}


def _trials(runs: list[Any]) -> list[Any]:
    return [r for r in runs if r.data.tags.get(f"{TAG}kind") == "trial"]


def changed_runs(runs: list[Any]) -> list[dict[str, Any]]:
    """The trial runs among ``runs`` (as ``search_runs`` returns them) whose result metrics differ from the digest
    they recorded as they ended: ``run_id, phase, cell, seed, metrics`` (the ``test_*`` keys it has now), ``why``."""
    flagged = []
    for run in _trials(runs):
        recorded = run.data.tags.get(f"{TAG}{RESULTS_DIGEST}")
        if recorded is not None and results_digest(run.data.metrics) != recorded:
            metrics = sorted(k for k in run.data.metrics if k.startswith(RESULT_METRICS))
            flagged.append(_flag(run, metrics, f"its result metrics differ from those it recorded as it ended "
                                               f"(digest {recorded.split()[0]} metric(s))"))
    return flagged


def history_flags(mlflow_client: Any, runs: list[Any]) -> list[dict[str, Any]]:
    """The ended trial runs among ``runs`` with a result metric (``test_*``) that holds more than one value in its
    history, or a value logged after the run ended (one history request per metric)."""
    flagged = []
    for run in _trials(runs):
        end = run.info.end_time
        keys = sorted(k for k in run.data.metrics if k.startswith(RESULT_METRICS))
        if end is None or not keys:
            continue
        several, late = [], []
        for key in keys:
            history = mlflow_client.get_metric_history(run.info.run_id, key)
            if len({repr(m.value) for m in history}) > 1:
                several.append(key)
            if any(m.timestamp > end for m in history):
                late.append(key)
        if several:
            flagged.append(_flag(run, several, "more than one value in the metric's history"))
        if late:
            flagged.append(_flag(run, late, "a value logged after the run ended"))
    return flagged


def verify_runs(mlflow_client: Any, runs: list[Any]) -> list[dict[str, Any]]:
    """:func:`changed_runs` and :func:`history_flags` of ``runs``, by run."""
    return sorted(changed_runs(runs) + history_flags(mlflow_client, runs), key=lambda f: (f["run_id"], f["why"]))


def study_changes(uri: str, study: str) -> list[dict[str, Any]]:
    """:func:`changed_runs` of the study's trial runs (one paged search)."""
    return changed_runs(search(uri, study, f"tags.`{TAG}kind` = 'trial'"))


def verify_study(uri: str, study: str) -> list[dict[str, Any]]:
    """:func:`verify_runs` of the study's trial runs."""
    return verify_runs(client(uri), search(uri, study, f"tags.`{TAG}kind` = 'trial'"))


def integrity_warning(flagged: list[dict[str, Any]]) -> str:
    """One line for the top of ``table.md`` and ``report.html`` (``""`` when nothing is flagged)."""
    if not flagged:
        return ""
    runs = len({f["run_id"] for f in flagged})
    return (f"WARNING: {runs} run(s) have results that changed after the run ended; the tables read the latest "
            "values (section 'Results changed after their runs ended'; `ndebench verify` lists every one).")


def integrity_markdown(flagged: list[dict[str, Any]]) -> str:
    """A ``table.md`` section listing the flagged runs (``""`` if none)."""
    if not flagged:
        return ""
    lines = ["", "## Results changed after their runs ended", "",
             "| run | phase | cell | seed | metrics | what |", "|---|---|---|---|---|---|"]
    lines += [f"| {f['run_id']} | {f['phase']} | {f['cell']} | {f['seed']} | {', '.join(f['metrics'])} | {f['why']} |"
              for f in flagged[:LISTED]]
    if len(flagged) > LISTED:
        lines.append(f"\n... and {len(flagged) - LISTED} more (summary.json `changed_results`).")
    return "\n".join(lines) + "\n"
