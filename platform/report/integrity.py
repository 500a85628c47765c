"""Runs changed after they ended, or forged beside the study's own: what every report flags, and what ``ndebench
verify`` finds.

MLflow keeps every value logged to a metric, reports read the latest, and anyone who may write a study can log
another (``log_metric(run, "test_accuracy", 0.96)``), set any tag (``ndebench.regularizer``, ``ndebench.kind``) or
make a whole run, which no non-admin can remove again. Three checks:

- *The report* (no request per run, so that a study of 20,000 runs reports as fast as before): each trial run
  records, as it ends, its digest (``ndebench.results_digest``,
  :func:`~ndebench.platform.record.summaries.record_digest`: its result metrics, the tags that decide its cell,
  seed, phase, kind, status and lease, and its params); the report recomputes it from what ``search_runs``
  already returned and flags a run whose results, tags or params differ, and an evaluate (cell, seed) with two
  finished runs of one config (a run forged beside the real one). Runs recorded before the digest covered tags
  carry the older digest (result metrics only): their results are checked, their tags are not.
- ``ndebench verify`` (one request per result metric of each trial run, and one read of the study's lease
  records): besides the report's checks, the full history of every ``test_*`` metric (more than one value, or a
  value logged after its run ended: this also catches a rewrite that set a matching digest), runs tagged
  ``ndebench.kind=lease`` that hold no lease claim (a trial run hidden from the readers), and trial runs whose
  lease (``ndebench.lease``, ``ndebench.lease_id``) is no claim's.
- *The fingerprint* (:func:`fingerprint`): a hash over the id and the recomputed digest of every counted run.
  A writer can still forge a whole run, digest included, and hide the real one in a way no check above tells
  from the record; the fingerprint changes with any such change, so a reader who noted it after a clean
  ``verify`` finds out with ``ndebench verify --fingerprint F``.

None catches a change made in the database itself (an admin of the store), nor a run the worker never ended.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ndebench.platform.record.completeness import counting
from ndebench.platform.record.lease.ledger import KIND, PREFIX, claims, every_run, is_lease_run, lease_runs
from ndebench.platform.record.schema import FINISHED_STATUSES, PLAN_DIGEST, SWEEP_SHA, TAG
from ndebench.platform.record.summaries import (
    DIGEST_VERSION,
    RESULT_METRICS,
    RESULTS_DIGEST,
    UNFINISHED,
    digest_of,
    plan_digest,
    results_digest,
    text_sha,
)
from ndebench.platform.record.tracking import client, run_status, search, study_yaml

LISTED = 50
DIGEST = f"{TAG}{RESULTS_DIGEST}"


def _flag(run: Any, metrics: list[str], why: str) -> dict[str, Any]:
    tags = run.data.tags
    return {"run_id": run.info.run_id, "phase": tags.get(f"{TAG}phase", ""), "cell": tags.get(f"{TAG}cell", ""),
            "seed": tags.get(f"{TAG}seed", ""), "metrics": metrics, "why": why}


def _trials(runs: list[Any]) -> list[Any]:
    """Trial runs, and any run that carries a trial's digest whatever its kind now says."""
    return [r for r in runs if r.data.tags.get(f"{TAG}kind") == "trial" or DIGEST in r.data.tags]


def _results(run: Any) -> list[str]:
    return sorted(k for k in run.data.metrics if k.startswith(RESULT_METRICS))


def _digests_since(runs: list[Any]) -> float:
    """The start time (ms) from which every finished trial run must carry a digest of this format: the study run's
    where it recorded :data:`~ndebench.platform.record.schema.SWEEP_SHA` (a param, which no writer can remove: the
    study was begun by a release that digests every run), else the first run that carries one; ``inf`` when none
    does (a study recorded before digests, whose runs are not held to one)."""
    study = [r.info.start_time or 0 for r in runs if r.data.tags.get(f"{TAG}kind") == "study"
             and SWEEP_SHA in r.data.params]
    if study:
        return float(min(study))
    digested = [r.info.start_time or 0 for r in runs
                if r.data.tags.get(DIGEST, "").startswith(f"{DIGEST_VERSION} ")]
    return float(min(digested)) if digested else math.inf


def _digest_flag(run: Any, since: float = math.inf) -> dict[str, Any] | None:
    recorded = run.data.tags.get(DIGEST)
    due = (run.info.start_time or 0) >= since
    if recorded is None or recorded == UNFINISHED:
        status = run_status(run)
        return _flag(run, [], f"it reads as {status} but holds no digest of its end") if (
            status in FINISHED_STATUSES and (due or recorded == UNFINISHED)) else None
    parts = recorded.split() or [""]
    if parts[0] != DIGEST_VERSION:
        if due:
            return _flag(run, _results(run), "it carries the older digest (results only), though the study's runs "
                                             "record the digest of their tags and params: one set by hand")
        return None if results_digest(run.data.metrics) == recorded else _flag(
            run, _results(run), f"its result metrics differ from those it recorded as it ended (digest {parts[0]} "
                                "metric(s), of the older format: results only)")
    now = digest_of(run).split()
    if len(parts) != len(now) or now[2] != parts[2]:
        return _flag(run, _results(run), f"its result metrics differ from those it recorded as it ended (digest "
                                         f"{parts[1]} metric(s))")
    if now[3:] != parts[3:]:
        return _flag(run, [], "its tags or params differ from those it recorded as it ended (what decides its cell, "
                              "seed, phase, kind, status or lease)")
    return None


def _placed(run: Any) -> bool:
    """Whether a reader has a place for the run: the study run, a cell or trial run of a stage, the report run, a
    re-evaluation run."""
    tags = run.data.tags
    kind, phase = tags.get(f"{TAG}kind"), tags.get(f"{TAG}phase")
    return kind == "study" or (kind in ("cell", "trial") and bool(phase)) or (
        kind is None and phase in ("report", "reevaluate"))


def unplaced(runs: list[Any]) -> list[dict[str, Any]]:
    """Runs of the study no reader places (no ``ndebench.kind`` and ``ndebench.phase`` that say what it is: a run
    whose tags were removed is left out of every table, so it is named instead), each with the lease epoch it
    carries."""
    return [_flag(r, _results(r), f"it carries no ndebench.kind and ndebench.phase a reader places (kind "
                                  f"{r.data.tags.get(f'{TAG}kind', 'none')}, lease epoch "
                                  f"{r.data.tags.get(f'{TAG}lease', 'none')}): no table counts it, so it may be a "
                                  "run hidden by removing its tags")
            for r in runs if not _placed(r) and not (r.data.tags.get(f"{TAG}kind") == KIND
                                                      and f"{TAG}phase" not in r.data.tags)]


def plan_flags(runs: list[Any]) -> list[dict[str, Any]]:
    """The study run when the plan among ``runs`` (the evaluate cell runs' ``planned_hashes`` and the planned seeds,
    what decides which runs count) differs from the digest the sweep recorded
    (:func:`~ndebench.platform.record.summaries.plan_digest`), or when a study begun by this release has none."""
    flagged = []
    for run in runs:
        if run.data.tags.get(f"{TAG}kind") != "study":
            continue
        sealed = run.data.tags.get(PLAN_DIGEST)
        if sealed is None and SWEEP_SHA in run.data.params:
            flagged.append(_flag(run, [], "the study run holds no digest of its plan (ndebench.plan_digest): the "
                                          "planned configs and seeds that decide which runs count are unchecked"))
        elif sealed is not None and sealed != plan_digest(runs):
            flagged.append(_flag(run, [], "the plan (the evaluate cell runs' ndebench.planned_hashes, the planned "
                                          "seeds) differs from the one the sweep recorded: it decides which runs "
                                          "count"))
    return flagged


def sweep_flags(runs: list[Any], text: str | None) -> list[dict[str, Any]]:
    """The study run when its ``sweep.yaml`` (``text``, as downloaded) differs from the SHA-256 it recorded as it
    began (its param :data:`~ndebench.platform.record.schema.SWEEP_SHA`): the report's settings come from it."""
    return [_flag(r, [], f"its sweep.yaml (sha256 {text_sha(text)[:16]}) differs from the one it recorded as it "
                         f"began ({r.data.params[SWEEP_SHA][:16]}): the report ignores it")
            for r in runs if r.data.tags.get(f"{TAG}kind") == "study" and SWEEP_SHA in r.data.params
            and r.data.params[SWEEP_SHA] != text_sha(text)]


def _twins(runs: list[Any]) -> list[dict[str, Any]]:
    """Each evaluate run of a (cell, seed) and config hash that has more than one finished run."""
    groups: dict[tuple[str, ...], list[Any]] = defaultdict(list)
    for run in _trials(runs):
        tags = run.data.tags
        if tags.get(f"{TAG}phase") == "evaluate" and run_status(run) in FINISHED_STATUSES:
            groups[tuple(tags.get(f"{TAG}{k}", "") for k in ("cell", "seed", "config_hash"))].append(run)
    return [_flag(run, [], f"one of {len(group)} finished runs of its (cell, seed) and config: the newest counts, so "
                           "one may be forged") for group in groups.values() if len(group) > 1 for run in group]


def changed_runs(runs: list[Any]) -> list[dict[str, Any]]:
    """What the report flags among ``runs`` (every run of the study, as ``search_runs`` returns them): runs whose
    results, tags or params differ from the digest they recorded as they ended, or that read as finished without
    a digest of their end (or with the older one in a study whose runs record this one), the runs of an evaluate
    (cell, seed) and config with more than one finished run, runs no reader places (:func:`unplaced`) and a plan
    that differs from its digest (:func:`plan_flags`): ``run_id, phase, cell, seed, metrics`` (the ``test_*`` keys
    concerned), ``why``."""
    since = _digests_since(runs)
    flagged = [f for f in (_digest_flag(r, since) for r in _trials(runs)) if f is not None]
    flagged += _twins(runs) + unplaced(runs) + plan_flags(runs)
    return sorted(flagged, key=lambda f: (f["run_id"], f["why"]))


def older_digests(runs: list[Any]) -> int:
    """How many of ``runs`` carry the older digest (their result metrics only): a change to their tags is not
    seen."""
    return sum(1 for r in _trials(runs) if r.data.tags.get(DIGEST, UNFINISHED) != UNFINISHED
               and not r.data.tags[DIGEST].startswith(f"{DIGEST_VERSION} "))


def history_flags(mlflow_client: Any, runs: list[Any]) -> list[dict[str, Any]]:
    """The ended trial runs among ``runs`` with a result metric (``test_*``) that holds more than one value in its
    history, or a value logged after the run ended (one history request per metric)."""
    flagged = []
    for run in _trials(runs):
        end = run.info.end_time
        keys = _results(run)
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


def hidden_as_lease(recorded: list[Any]) -> list[dict[str, Any]]:
    """Runs of ``recorded`` tagged ``ndebench.kind=lease`` that hold no lease claim or carry a result: a run
    retagged to hide it from every reader (which skip lease runs)."""
    found = {c.run_id for c in claims(recorded)}
    return [_flag(r, _results(r), "tagged as a lease run, but it holds no lease claim or carries results: a run "
                                  "hidden from every reader")
            for r in recorded if r.data.tags.get(f"{TAG}kind") == KIND and (_results(r) or r.info.run_id not in found)]


def report_check(uri: str, study: str, runs: list[Any]) -> tuple[list[dict[str, Any]], str]:
    """What a report of ``study`` flags and its fingerprint, given every run of the study (``runs``, one paged
    search): :func:`changed_runs`, :func:`sweep_flags` and :func:`hidden_as_lease` of its active lease runs (one
    filtered search and one artifact download)."""
    experiment = client(uri).get_experiment_by_name(study)
    leases = [r for r in lease_runs(client(uri), experiment.experiment_id)
              if r.info.lifecycle_stage == "active"] if experiment is not None else []
    sweep = study_yaml(uri, study, bound=False)
    flagged = changed_runs(runs) + sweep_flags(runs, sweep) + hidden_as_lease(leases)
    return sorted(flagged, key=lambda f: (f["run_id"], f["why"])), fingerprint(runs, sweep)


def ledger_flags(recorded: list[Any], runs: list[Any]) -> list[dict[str, Any]]:
    """Against the lease records in ``recorded`` (every run of the study's experiment): runs tagged
    ``ndebench.kind=lease`` that hold no claim or carry a result, lease records in runs that are no lease run (the
    study run's, say: no driver's), and trial runs of ``runs`` whose lease epoch and id are no claim's."""
    found = claims(recorded)
    flagged = hidden_as_lease(recorded)
    flagged += [_flag(r, [], f"it holds a lease record ({next(k for k in r.data.params if k.startswith(PREFIX))}) "
                             "but is no lease run: no driver wrote it there")
                for r in recorded if not is_lease_run(r) and any(k.startswith(PREFIX) for k in r.data.params)]
    held = {(str(c.epoch), c.id) for c in found}
    for run in _trials(runs):
        epoch, lease_id = (run.data.tags.get(f"{TAG}{k}") for k in ("lease", "lease_id"))
        if epoch and lease_id and (epoch, lease_id) not in held:
            flagged.append(_flag(run, [], f"its lease (epoch {epoch}, id {lease_id}) is no claim of the study's "
                                          "lease records"))
    return flagged


def verify_runs(mlflow_client: Any, runs: list[Any], recorded: list[Any] | None = None) -> list[dict[str, Any]]:
    """:func:`changed_runs`, :func:`history_flags` and, given every run of the study's experiment
    (``recorded``), :func:`ledger_flags` of ``runs``, by run."""
    flagged = changed_runs(runs) + history_flags(mlflow_client, runs)
    flagged += ledger_flags(recorded, runs) if recorded is not None else []
    return sorted(flagged, key=lambda f: (f["run_id"], f["why"]))


def fingerprint(runs: list[Any], sweep: str | None = None) -> str:
    """``"<n>:<sha256 prefix>"`` over the id and recomputed digest
    (:func:`~ndebench.platform.record.summaries.digest_of`) of each of the ``n`` evaluate runs a report counts
    among ``runs``, and the SHA-256 of the study run's ``sweep.yaml`` (``sweep``, as downloaded; the report's
    settings come from it): it changes with any result, tag, param or setting a reader uses, and with the run that
    counts."""
    evaluate = [r for r in runs if r.data.tags.get(f"{TAG}phase") == "evaluate"]
    lines = sorted(f"{r.info.run_id} {digest_of(r)}" for r in counting(evaluate).counted.values())
    counted = len(lines)
    lines += [] if sweep is None else [f"sweep.yaml {text_sha(sweep)}"]
    return f"{counted}:{hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:20]}"


def study_changes(uri: str, study: str) -> list[dict[str, Any]]:
    """:func:`changed_runs` of the study's runs (one paged search)."""
    return changed_runs(search(uri, study))


@dataclass(frozen=True)
class Verification:
    """What ``ndebench verify`` found: the ``flagged`` runs (:func:`verify_runs`), the study's ``fingerprint``,
    whether it differs from the one a reader gave (``changed``) and the ``lines`` it prints."""

    flagged: list[dict[str, Any]]
    fingerprint: str
    changed: bool
    lines: list[str]

    @property
    def ok(self) -> bool:
        return not self.flagged and not self.changed


def verify_study(uri: str, study: str, expected: str | None = None) -> Verification:
    """:func:`verify_runs` of the study's runs with its lease records, and its :func:`fingerprint` compared with
    ``expected`` (one a reader noted before), when given."""
    mlflow_client = client(uri)
    runs = search(uri, study)
    experiment = mlflow_client.get_experiment_by_name(study)
    recorded = every_run(mlflow_client, experiment.experiment_id) if experiment is not None else []
    sweep = study_yaml(uri, study, bound=False)
    flagged = sorted(verify_runs(mlflow_client, runs, recorded) + sweep_flags(runs, sweep),
                     key=lambda f: (f["run_id"], f["why"]))
    now = fingerprint(runs, sweep)
    changed = expected is not None and expected != now
    lines = [f"run {f['run_id']} ({f['phase']} {f['cell']} seed {f['seed']}): "
             + (f"{', '.join(f['metrics'])}: " if f["metrics"] else "") + f["why"] for f in flagged]
    count = len({f["run_id"] for f in flagged})
    lines.append(f"study {study!r}: " + (f"{count} run(s) changed after they ended, forged or hidden" if flagged
                                         else "no run changed after it ended, forged or hidden"))
    if older := older_digests(runs):
        lines.append(f"{older} run(s) carry the digest of the older format (result metrics only): a change to their "
                     "tags is not seen by the digest, only by the fingerprint")
    if expected is None:
        lines.append(f"fingerprint {now} (note it: `ndebench verify --study {study} --fingerprint {now}` says "
                     "later whether anything a report reads changed)")
    elif changed:
        lines.append(f"fingerprint {now}: CHANGED since {expected} was noted (a result, tag or param a report "
                     "reads, or which run counts)")
    else:
        lines.append(f"fingerprint {now}: unchanged since it was noted")
    return Verification(flagged, now, changed, lines)


def integrity_warning(flagged: list[dict[str, Any]]) -> str:
    """One line for the top of ``table.md`` and ``report.html`` (``""`` when nothing is flagged)."""
    if not flagged:
        return ""
    runs = len({f["run_id"] for f in flagged})
    return (f"WARNING: {runs} run(s) have results or tags that changed after the run ended, or a forged twin; the "
            "tables read the latest values (section 'Results changed after their runs ended'; `ndebench verify` "
            "lists every one).")


def fingerprint_line(study: str, fingerprint: str, flagged: list[dict[str, Any]]) -> str:
    """The line of ``table.md`` and ``report.html`` that names the study's :func:`fingerprint`, how to check it
    later, and what the report verified (each run's digest, :func:`changed_runs`)."""
    checked = (f"{len({f['run_id'] for f in flagged})} run(s) changed after they ended (the warning above)"
               if flagged else "every run's results matched its digest when this report was written")
    return (f"Study fingerprint {fingerprint}: check it with `ndebench verify --study {study} --fingerprint "
            f"{fingerprint}` (it changes with anything a report reads); {checked}.")


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
