"""Which evaluate runs a study counts: per (cell, seed), the current run of the config the latest sweep planned.

The sweep records its plan on each evaluate cell run (tag :data:`~ndebench.platform.record.schema.PLANNED_HASHES`:
the config hash of every planned seed; ``{}`` on a cell the config no longer has). A (cell, seed) may have
several runs (``--resume`` reran an errored or cut-off attempt, the config changed, a second driver ran it). Its
current run is, among its runs of the planned hash, the newest that finished (``ok`` or ``diverged``), else the
newest of any status; so a rerun under a changed config that failed is what counts, never an older success of
another config. Runs of another config, of a seed or cell not planned, stay in MLflow and are left out of the
statistics (finished ones listed with why, :func:`left_out_finished`); every attempt beside a current run gets
the tag ``ndebench.superseded_by``. A study recorded before the plan tag counts the newest finished run whatever
its config.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ndebench.platform.record.schema import FINISHED_STATUSES, PLAN_DIGEST, PLANNED_HASHES, SUPERSEDED, TAG
from ndebench.platform.record.store import client, retry
from ndebench.platform.record.summaries import plan_digest
from ndebench.platform.record.tracking import finish_cell, run_status, search

# cell key -> seed -> the config hash the latest sweep planned (None: the cell has no evaluated config).
Plan = dict[str, dict[int, str | None]]
EVALUATE = f"tags.`{TAG}phase` = 'evaluate'"


def group_attempts(runs: Iterable[Any]) -> dict[tuple[str, int], list[Any]]:
    """Evaluate trial ``runs`` by (cell key, seed), oldest first; runs without both tags are left out."""
    grouped: dict[tuple[str, int], list[Any]] = {}
    for run in runs:
        tags = run.data.tags
        if tags.get(f"{TAG}kind") == "cell":
            continue
        try:
            key = (tags[f"{TAG}cell"], int(tags[f"{TAG}seed"]))
        except (KeyError, ValueError):
            continue
        grouped.setdefault(key, []).append(run)
    for group in grouped.values():
        group.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
    return grouped


def attempts(uri: str, study: str) -> dict[tuple[str, int], list[Any]]:
    """Every evaluate trial run of ``study`` by (cell key, seed), oldest first."""
    return group_attempts(search(uri, study, f"{EVALUATE} and tags.`{TAG}kind` = 'trial'"))


def read_plan(runs: Iterable[Any]) -> Plan | None:
    """The plan recorded on the evaluate cell runs among ``runs``; ``None`` when none carries it (a study
    recorded before the tag, or runs read without their cell runs)."""
    plan: Plan = {}
    for run in runs:
        tags = run.data.tags
        if tags.get(f"{TAG}kind") != "cell" or PLANNED_HASHES not in tags:
            continue
        try:
            hashes = json.loads(tags[PLANNED_HASHES])
            plan[tags[f"{TAG}cell"]] = {int(seed): value for seed, value in hashes.items()}
        except (KeyError, ValueError, AttributeError):
            continue
    return plan or None


def record_plan(uri: str, hashes: dict[str, dict[int, str | None]]) -> None:
    """Write the plan on the evaluate cell runs: cell run id -> seed -> planned config hash (``{}``: a cell
    the config no longer has)."""
    from mlflow.entities import RunTag

    mlflow_client = client(uri)
    for run_id, planned in hashes.items():
        tag = RunTag(PLANNED_HASHES, json.dumps({str(seed): value for seed, value in sorted(planned.items())}))
        retry(lambda run_id=run_id, tag=tag: mlflow_client.log_batch(run_id, tags=[tag]))


def seal_plan(uri: str, study: str, study_run_id: str) -> None:
    """Record on the study run the digest of the plan as it now stands
    (:func:`~ndebench.platform.record.summaries.plan_digest`, tag ``ndebench.plan_digest``): a later change of a
    cell run's ``planned_hashes`` or of the planned seeds, which decide what the report counts, is then flagged
    (``report.integrity``)."""
    runs = search(uri, study, f"{EVALUATE} and tags.`{TAG}kind` = 'cell'") + search(
        uri, study, f"tags.`{TAG}kind` = 'study'")
    digest = plan_digest(runs)
    retry(lambda: client(uri).set_tag(study_run_id, PLAN_DIGEST, digest))


def current(runs: list[Any], wanted: str | None = None) -> Any | None:
    """The run that counts among the attempts of one (cell, seed), oldest first: of those with config hash
    ``wanted`` (all of them when ``None``), the newest finished, else the newest; ``None`` when none has it."""
    mine = runs if wanted is None else [r for r in runs if r.data.tags.get(f"{TAG}config_hash") == wanted]
    finished = [r for r in mine if run_status(r) in FINISHED_STATUSES]
    return (finished or mine)[-1] if mine else None


def _why_not_planned(plan: Plan, cell: str, seed: int) -> str | None:
    """Why the latest plan has no config for (cell, seed), or ``None`` when it has one."""
    if not plan.get(cell):
        return "its cell is not in the current config"
    if seed not in plan[cell]:
        return f"seed {seed} is not in the current config's evaluate.seeds"
    if plan[cell][seed] is None:
        return "its cell has no evaluated config in the current plan (its search failed)"
    return None


@dataclass
class Counting:
    """What the readers count: ``counted`` (cell, seed) -> current run, and the finished runs ``left_out``
    (cell, seed, run_id, status, counted_instead (``""`` when nothing is), reason)."""

    counted: dict[tuple[str, int], Any] = field(default_factory=dict)
    left_out: list[dict[str, Any]] = field(default_factory=list)


def count(grouped: dict[tuple[str, int], list[Any]], plan: Plan | None) -> Counting:
    """The current run of every (cell, seed) in ``grouped`` under ``plan``, and the finished runs left out."""
    out = Counting()
    for (cell, seed), runs in sorted(grouped.items()):
        unplanned = _why_not_planned(plan, cell, seed) if plan is not None else None
        wanted = plan[cell][seed] if plan is not None and unplanned is None else None
        keep = None if unplanned else current(runs, wanted)
        if keep is not None:
            out.counted[(cell, seed)] = keep
        for run in runs:
            if run is keep or run_status(run) not in FINISHED_STATUSES:
                continue
            found = run.data.tags.get(f"{TAG}config_hash", "")
            reason = unplanned or (f"config changed: hash {found}, the current config's is {wanted}"
                                   if wanted is not None and found != wanted
                                   else "a newer finished run of the same config counts" if wanted is not None
                                   else "a newer finished run of its (cell, seed) counts")
            out.left_out.append({"cell": cell, "seed": seed, "run_id": run.info.run_id, "status": run_status(run),
                                 "counted_instead": keep.info.run_id if keep is not None else "",
                                 "reason": reason})
    return out


def counting(runs: list[Any]) -> Counting:
    """:func:`count` of evaluate ``runs`` (trial runs, and the cell runs that carry the plan)."""
    return count(group_attempts(runs), read_plan(runs))


def counted_runs(runs: Iterable[Any]) -> list[Any]:
    """Evaluate ``runs`` (in their order) without those :func:`count` leaves out: the current run of each
    (cell, seed), and every run without those tags (cell runs included)."""
    runs = list(runs)
    grouped = group_attempts(runs)
    keyed = {r.info.run_id for group in grouped.values() for r in group}
    kept = {r.info.run_id for r in count(grouped, read_plan(runs)).counted.values()}
    return [r for r in runs if r.info.run_id in kept or r.info.run_id not in keyed]


def left_out_finished(uri: str, study: str, recorded: list[Any] | None = None) -> list[dict[str, Any]]:
    """The finished runs no report counts, each with why and the run counted instead (``""`` where none is):
    a run of another config, of a seed or cell the config no longer has, a duplicate recorded by a second
    driver, an attempt a rerun superseded. ``recorded``: the study's evaluate runs when already read."""
    return counting(search(uri, study, EVALUATE) if recorded is None else recorded).left_out


def mark_superseded(uri: str, study: str) -> int:
    """Tag every attempt beside its (cell, seed)'s current run ``superseded_by`` it, and drop the tag from a
    current run (one an earlier plan superseded); return how many tags changed."""
    mlflow_client, changed = client(uri), 0
    runs = search(uri, study, EVALUATE)
    grouped = group_attempts(runs)
    for key, keep in count(grouped, read_plan(runs)).counted.items():
        for run in grouped[key]:
            tag = run.data.tags.get(SUPERSEDED)
            if run is keep and tag is not None:
                retry(lambda run=run: mlflow_client.delete_tag(run.info.run_id, SUPERSEDED))
                changed += 1
            elif run is not keep and tag != keep.info.run_id:
                retry(lambda run=run, keep=keep: mlflow_client.set_tag(run.info.run_id, SUPERSEDED, keep.info.run_id))
                changed += 1
    return changed


def planned_statuses(uri: str, study: str, cells: list[str], seeds: list[int]) -> dict[tuple[str, int], str]:
    """The status of every planned (cell key, seed): its current run's under the recorded plan, or ``missing``."""
    found = counting(search(uri, study, EVALUATE)).counted
    return {(cell, seed): run_status(found[(cell, seed)]) if (cell, seed) in found else "missing"
            for cell in cells for seed in seeds}


def not_ok_summary(statuses: dict[tuple[str, int], str]) -> str:
    """``"2 of 4 planned evaluate run(s) not ok (1 error, 1 missing)"``, or ``""`` when every run is ok or
    diverged (a diverged run is a result: the report counts it)."""
    bad = Counter(s for s in statuses.values() if s not in FINISHED_STATUSES)
    if not bad:
        return ""
    detail = ", ".join(f"{n} {status}" for status, n in sorted(bad.items()))
    return f"{sum(bad.values())} of {len(statuses)} planned evaluate run(s) not ok ({detail})"


class IncompleteEvaluationError(RuntimeError):
    """An evaluate cell would be written ``done`` while a planned seed has no run that ended."""


def finish_evaluate_cell(uri: str, run_id: str, *, planned: Iterable[int], ended: Iterable[int],
                         params: dict[str, Any], metrics: dict[str, float]) -> None:
    """Write an evaluate cell ``done`` with its evaluated config and statistics: only when every ``planned``
    seed is among the seeds whose current run ended (``ok``, ``diverged``, ``error`` or ``timeout``); else
    :class:`IncompleteEvaluationError`, and the cell stays as it was."""
    missing = sorted(set(planned) - set(ended))
    if missing:
        raise IncompleteEvaluationError(f"cell run {run_id}: no run ended for seed(s) {missing}; an evaluate cell "
                                        "is done only when every planned seed has one")
    finish_cell(uri, run_id, "done", params=params, metrics=metrics)
