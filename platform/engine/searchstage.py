"""The search stages (``base``, ``tune``): every cell's trials in one Ray Tune run through
:class:`~ndebench.platform.engine.searcher.CellSearcher` (one seeded Optuna study per cell), optionally with ASHA
per cell; with ``resources.stack`` a cell whose points differ only in the regularizer's hyperparameters trains them
stacked (:func:`stack_sizes`). Each cell's best values are recorded on its cell run, once its budget is spent.
``resume`` reads every
``done`` cell's choice back from MLflow, continues interrupted searches from the trials that ended (the cut-off
ones continue their runs) and starts failed ones over.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

from ndebench.platform.common.metrics import decisive
from ndebench.platform.engine.searchspace import Past, contains
from ndebench.platform.engine.stacktrainable import member_outcomes, stack_group
from ndebench.platform.engine.stages import StageContext, trial_dirname
from ndebench.platform.record.interruption import mark_interrupted
from ndebench.platform.record.schema import RESUMABLE_STATUSES, SPENT_STATUSES
from ndebench.platform.record.searchtrials import SearchTrial, finish_search_cell, retire, search_trials
from ndebench.platform.record.tracking import TAG, cell_run, cell_states
from ndebench.platform.spec.config import ENVIRONMENT_KEYS, Space, config_hash
from ndebench.platform.spec.plan import (
    CellSearch,
    Stage,
    cell_template,
    pick_best,
    plan_stages,
    stage_for_cells,
    sweep_cells,
)
from optuna.trial import TrialState


def decode(space: Space, text: str) -> Any:
    """A chosen value read back from an MLflow param (a string) as the type its search space gives."""
    if space.kind == "choice":
        return next(v for v in space.args if str(v) == text)
    return int(text) if space.kind == "randint" else float(text)


def _failed(state: Any) -> bool:
    return state.data.tags.get(f"{TAG}status") == "failed"


def _search_rerun_reason(state: Any) -> str:
    """Why ``--resume`` searches a cell again: its cell run's state (``None``: the cell never started)."""
    if state is None:
        return "not started"
    status = state.data.tags.get(f"{TAG}status")
    if status == "failed":
        return f"failed, searched again from the start: {state.data.tags.get(f'{TAG}error', '')[:200]}"
    if status == "interrupted":
        return "interrupted, its search continues"
    return "unfinished (its driver was lost), its search continues"


def _values(trial: SearchTrial, search: CellSearch) -> dict[str, Any] | None:
    """The searched values of a recorded trial of ``search``'s cell, or ``None`` when it ran another search
    (another fixed value, or a value outside the space): such a trial neither counts nor is chosen."""
    fixed = {k: v for k, v in search.template.items() if k not in search.space and k not in ENVIRONMENT_KEYS}
    if any(trial.params.get(k) != str(v) for k, v in fixed.items()):
        return None
    values = {}
    for key, space in search.space.items():
        try:
            values[key] = decode(space, trial.params[key])
        except (KeyError, StopIteration, ValueError):
            return None
        if not contains(space, values[key]):
            return None
    return values


def _history(ctx: StageContext, stage: str, searches: list[CellSearch], metric: str) -> dict[str, list[Any]]:
    """Per cell, its recorded trials as (trial, searched values, score or ``None``): every trial of this search."""
    recorded = search_trials(ctx.tracking_uri, ctx.spec.study, stage)
    out = {}
    for search in searches:
        mine = [(t, v) for t in recorded.get(search.key, []) if (v := _values(t, search)) is not None]
        out[search.key] = [(t, v, t.score(ctx.tracking_uri, metric) if t.status == "ok" else None) for t, v in mine]
    return out


def _past(history: list[Any], search: CellSearch, sampler: str) -> Past:
    """What a cell's search continues from: its ended trials (one per grid point under ``grid``, the newest)
    and its unfinished ones."""
    ended, seen = [], set()
    for trial, values, score in reversed(history):
        if trial.status not in SPENT_STATUSES:
            continue
        point = tuple(values[k] for k in search.space)
        if sampler == "grid" and point in seen:
            continue
        seen.add(point)
        usable = score is not None and math.isfinite(score)
        state = (TrialState.COMPLETE if usable else TrialState.PRUNED if trial.status == "stopped"
                 else TrialState.FAIL)
        ended.append((values, state, decisive(score) if usable else None))  # as the searcher tells a live one
    unfinished = tuple(v for t, v, _ in history if t.status in RESUMABLE_STATUSES)
    return Past(tuple(reversed(ended)), unfinished)


def stack_sizes(stage: Stage, size: int) -> tuple[dict[str, int], str]:
    """Per cell key, how many of its points one Tune trial trains as a stack (``resources.stack`` = ``size``), and
    what the stage line says of it. A cell stacks when every searched key is a regularizer hyperparameter
    (``regularizer.*``: its points share every model, training and solver setting, hence every shape), and only
    without ASHA: ASHA stops whole Tune trials, and a stack's members reach each rung together, so it could not
    stop one member and keep the others as it does unstacked trials; and only under the ``grid`` and ``random``
    samplers, whose points do not depend on the trials that ended before (a TPE stack of K would ask K at once)."""
    if size <= 1:
        return {}, ""
    cells = {c.key: size for c in stage.cells
             if c.space and all(k.startswith("regularizer.") for k in c.space)}
    if not cells:
        return {}, ""
    if stage.tune.scheduler == "asha":
        return {}, f"; resources.stack={size} not applied: ASHA stops Tune trials, not the members of a stack"
    if stage.tune.sampler == "tpe":
        return {}, (f"; resources.stack={size} not applied: TPE proposes each point from the trials ended before it, "
                    "and a stack would ask its points at once")
    return cells, f"; up to {size} points per Tune trial, stacked, in {len(cells)} of {len(stage.cells)} cell(s)"


def later_trials(spec: Any, stage: str) -> int:
    """Tune trials the plan holds after search stage ``stage``: the later search stages' and the evaluate stage's,
    with ``resources.stack`` as the stages stack them (a stacked search cell's budget in stacks of up to ``stack``;
    the evaluate trials of each :func:`~ndebench.platform.engine.stacktrainable.stack_group`, seeds included,
    likewise, grouped by the cells' templates), as the stage's ETA costs each Tune trial. What a resume skips is
    still counted: the sweep ETA errs long."""
    size = spec.resources.stack
    stages = plan_stages(spec)
    search = 0
    for later in stages[[s.name for s in stages].index(stage) + 1:]:
        stacks, _ = stack_sizes(later, size)
        search += sum(-(-c.budget // stacks[c.key]) if c.key in stacks else c.budget for c in later.cells)
    seeds = len(spec.evaluate.seeds)
    groups = Counter(stack_group(cell_template(spec, c)) for c in sweep_cells(spec))
    return search + sum(-(-n * seeds // max(size, 1)) for n in groups.values())


def live_bound(wanted: int) -> int:
    """The trials a search stage keeps suggested and unfinished at once: ``wanted`` (the searcher's own limit), at
    most Ray's allowance of pending trials for a grid (200, or 1.1 per CPU of a larger cluster). The cluster stays
    full, and Tune does not create every trial of a large stage at its start: it keeps each one until the end."""
    import ray

    return max(1, min(wanted, max(200, int(1.1 * ray.cluster_resources().get("CPU", 1.0)))))


def search_stage(ctx: StageContext, stage: Stage) -> dict[str, dict[str, Any]]:
    """Run one search stage over its cells with something to search; return the chosen values per cell
    (searched keys only). A resumed cell continues its search: its trials that ended count against its
    budget, its unfinished ones continue their runs from their checkpoints. A cell is ``done`` only once its
    budget is spent; failed cells go to ``ctx.failed``; finished ones are read from MLflow."""
    from ndebench.platform.engine.progress import MarkStopped, StageProgress
    from ndebench.platform.engine.searcher import CellSearcher, LiveFIFOScheduler, PerCellASHA
    from ray import tune

    chosen = {c.key: {} for c in stage.cells if c.budget == 0}
    states = cell_states(ctx.tracking_uri, ctx.spec.study, stage.name) if ctx.resume else {}
    todo = set()
    for cell in stage.cells:
        state = states.get(cell.key)
        if cell.budget and state is not None and state.data.tags.get(f"{TAG}status") == "done":
            chosen[cell.key] = {k: decode(v, state.data.params[k]) for k, v in cell.space.items()}
        elif cell.budget:
            todo.add(cell.key)
    run = stage_for_cells(stage, todo)
    if not run.cells:
        if todo or any(c.budget for c in stage.cells):
            ctx.say(f"stage {stage.name}: every cell already done, chosen configs read from MLflow")
        return chosen
    tc = stage.tune
    resolved = [replace(c, template=ctx.resolve(c.template)) for c in run.cells]
    parents = {c.key: cell_run(ctx.tracking_uri, ctx.spec.study, ctx.study_run_id, stage.name, c.key,
                               ctx.cell_tags(c.cell)) for c in run.cells}
    history = _history(ctx, stage.name, resolved, tc.metric) if ctx.resume else {c.key: [] for c in resolved}
    restarted = [k for k, state in states.items() if k in history and _failed(state)]
    for key in restarted:
        # A failed search (no usable trial) starts over: its trials are what --resume is asked to retry.
        retire(ctx.tracking_uri, [t for t, _, _ in history[key]], parents[key])
        history[key] = []
    past = {c.key: _past(history[c.key], c, tc.sampler) for c in resolved}
    stacks, stacking = stack_sizes(run, ctx.spec.resources.stack)
    alone = [k for k in restarted if stacks.pop(k, None)]
    if alone:
        # One point's exception or time limit ends its whole stack: alone, it cannot end the others a second time.
        stacking += (f"; {len(alone)} failed cell(s) searched again one point per Tune trial, not stacked, so that "
                     "one point's fault cannot end the others again")
    searcher = CellSearcher(stage.name, resolved, tc, past, stacks)
    sampler = {"tpe": f"Optuna TPE ({tc.n_startup_trials} random start-up trials)", "random": "random search",
               "grid": "the full grid"}[tc.sampler]
    ended = sum(len(p.ended) for p in past.values())
    ctx.say(f"stage {stage.name}: {searcher.total} trial(s) over {len(run.cells)} cell(s), {sampler}, "
            f"{tc.metric} {tc.mode}" + (", ASHA early stopping" if tc.scheduler == "asha" else "")
            + (f"; {ended} trial(s) of an earlier driver already ended" if ended else "") + stacking)
    if ctx.resume:
        reasons = {(c.label, ""): _search_rerun_reason(states.get(c.key)) for c in run.cells}
        ctx.say_reruns(reasons, 0)
    outcomes: dict[str, list[dict[str, Any]]] = {c.key: [] for c in run.cells}
    if searcher.total:
        resume_runs = {config_hash({**c.template, **v, "phase": stage.name, "seed": 0}): t.run_id
                       for c in resolved for t, v, _ in history[c.key] if t.status in RESUMABLE_STATUSES}
        scheduler = LiveFIFOScheduler()
        if tc.scheduler == "asha":
            scheduler = PerCellASHA(tc.metric, tc.mode, tc.asha,
                                    {c.key: c.template["training.epochs"] for c in run.cells})
        progress = StageProgress(stage.name, searcher.tune_trials, {c.key: c.label for c in run.cells},
                                 tc.metric, tc.mode, ctx.ray.say_console, ctx.progress_every_s,
                                 later=later_trials(ctx.spec, stage.name))
        trainable = ctx.trainable_for(stage.name, parents, resume_runs=resume_runs, templates=searcher.templates)
        ctx.fit(stage.name, trainable, tune.TuneConfig(
            search_alg=searcher, scheduler=scheduler, num_samples=searcher.total, reuse_actors=True,
            # Also Ray's bound on pending trials (1 for a custom searcher without it): the cluster stays full.
            max_concurrent_trials=live_bound(searcher.max_live), trial_dirname_creator=trial_dirname,
        ), {}, [progress, MarkStopped(ctx.tracking_uri)])
        outcomes = member_outcomes(progress.outcomes)
        ctx.close_orphans(stage.name, outcomes, templates=searcher.templates)
    history = _history(ctx, stage.name, resolved, tc.metric)
    for cell in resolved:
        _choose(ctx, stage.name, cell, history[cell.key], parents[cell.key], outcomes[cell.key], chosen)
    return chosen


def _choose(ctx: StageContext, stage: str, cell: CellSearch, history: list[Any], parent: str,
            outcomes: list[dict[str, Any]], chosen: dict[str, dict[str, Any]]) -> None:
    """Close one cell of a search stage from its recorded trials: ``done`` with the best usable trial once its
    budget is spent, else failed (its search incomplete, or no usable trial)."""
    tc = ctx.spec.base if stage == "base" else ctx.spec.tune
    spent = _past(history, cell, tc.sampler).ended
    if len(spent) < cell.budget:
        ctx.fail(cell.key, cell.label, parent, stage, outcomes, status="interrupted",
                 reason=f"search incomplete: {len(spent)} of {cell.budget} trial(s) ended; --resume continues it")
        return
    usable = [(v, score) for _, v, score in history if score is not None and math.isfinite(score)]
    if not usable:
        ctx.fail(cell.key, cell.label, parent, stage, outcomes)
        return
    chosen[cell.key] = pick_best(usable, tc.mode)
    best = next(score for v, score in usable if v == chosen[cell.key])
    finish_search_cell(ctx.tracking_uri, parent, spent=len(spent), budget=cell.budget, params=chosen[cell.key],
                       metrics={f"best_{tc.metric}": best, "n_trials": len(history), "n_ok": len(usable)})

def close_runs_of_a_lost_driver(ctx: StageContext) -> None:
    """Runs an earlier driver left running (it died, or a second Ctrl-C cut its clean stop short): closed as
    ``interrupted``, so that their trials continue them from their checkpoints."""
    closed = mark_interrupted(ctx.tracking_uri, ctx.spec.study, "driver lost: left running by an earlier "
                              "`ndebench run` of this study that died")
    if closed:
        ctx.say(f"{closed} run(s) left running by an earlier driver that was lost closed as interrupted; "
                "their trials continue from their checkpoints")
