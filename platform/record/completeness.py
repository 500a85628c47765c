"""Which planned evaluate runs a study has: the current run of every (cell, seed), older attempts superseded.

A (cell, seed) may have several runs after ``--resume`` reran it (an errored or diverged attempt, or a
changed config). Its current run is the newest that finished (``ok`` or ``diverged``), else the newest of
any status; every other attempt gets the tag ``ndebench.superseded_by`` and is left out of reports.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ndebench.platform.record.schema import FINISHED_STATUSES, SUPERSEDED, TAG
from ndebench.platform.record.tracking import finish_cell, run_status, search


def group_attempts(runs: Iterable[Any]) -> dict[tuple[str, int], list[Any]]:
    """Evaluate trial ``runs`` by (cell key, seed), oldest first; runs without both tags are left out."""
    grouped: dict[tuple[str, int], list[Any]] = {}
    for run in runs:
        tags = run.data.tags
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
    return group_attempts(search(uri, study, f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'"))


def current_runs(runs: Iterable[Any]) -> list[Any]:
    """The current run of each (cell, seed) among evaluate trial ``runs``, and every run without those tags."""
    runs = list(runs)
    grouped = group_attempts(runs)
    keyed = {r.info.run_id for group in grouped.values() for r in group}
    return [current(group) for group in grouped.values()] + [r for r in runs if r.info.run_id not in keyed]


def left_out_finished(uri: str, study: str, recorded: list[Any] | None = None) -> list[dict[str, Any]]:
    """The finished runs no report counts: per (cell, seed) with more than one finished run, every one but
    its current run (a duplicate recorded by a second driver, or an attempt a rerun superseded), each with
    the run that is counted instead. ``recorded``: the study's evaluate runs when already read."""
    found = attempts(uri, study) if recorded is None else group_attempts(
        r for r in recorded if r.data.tags.get(f"{TAG}kind") == "trial")
    out = []
    for (cell, seed), runs in sorted(found.items()):
        keep = current(runs)
        out += [{"cell": cell, "seed": seed, "run_id": r.info.run_id, "status": run_status(r),
                 "counted_instead": keep.info.run_id}
                for r in runs if r is not keep and run_status(r) in FINISHED_STATUSES]
    return out


def current(runs: list[Any]) -> Any:
    """The run that counts among the attempts of one (cell, seed)."""
    finished = [r for r in runs if run_status(r) in FINISHED_STATUSES]
    return (finished or runs)[-1]


def mark_superseded(uri: str, study: str) -> int:
    """Tag every attempt that is not its (cell, seed)'s current run; return how many were newly tagged."""
    from ndebench.platform.record.tracking import client

    mlflow_client, count = client(uri), 0
    for runs in attempts(uri, study).values():
        keep = current(runs)
        for run in runs:
            if run is not keep and run.data.tags.get(SUPERSEDED) != keep.info.run_id:
                mlflow_client.set_tag(run.info.run_id, SUPERSEDED, keep.info.run_id)
                count += 1
    return count


def planned_statuses(uri: str, study: str, cells: list[str], seeds: list[int]) -> dict[tuple[str, int], str]:
    """The status of every planned (cell key, seed): its current run's, or ``missing``."""
    found = attempts(uri, study)
    return {(cell, seed): run_status(current(found[(cell, seed)])) if (cell, seed) in found else "missing"
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
