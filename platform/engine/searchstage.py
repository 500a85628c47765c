"""The search stages (``base``, ``tune``): every cell's trials in one Ray Tune run through
:class:`~ndebench.platform.engine.searcher.CellSearcher` (one seeded Optuna study per cell), optionally with ASHA
per cell; each cell's best values are recorded on its cell run. ``resume`` searches failed and unfinished cells
again and reads every finished cell's choice back from MLflow.
"""
from __future__ import annotations

from typing import Any

from ndebench.platform.engine.stages import StageContext, trial_dirname, usable
from ndebench.platform.record.tracking import TAG, cell_run, cell_states, close_orphaned_runs, finish_cell
from ndebench.platform.spec.config import Space
from ndebench.platform.spec.plan import Stage, stage_for_cells


def decode(space: Space, text: str) -> Any:
    """A chosen value read back from an MLflow param (a string) as the type its search space gives."""
    if space.kind == "choice":
        return next(v for v in space.args if str(v) == text)
    return int(text) if space.kind == "randint" else float(text)


def _search_rerun_reason(state: Any) -> str:
    """Why ``--resume`` searches a cell again: its cell run's state (``None``: the cell never started)."""
    if state is None:
        return "not started"
    status = state.data.tags.get(f"{TAG}status")
    if status == "failed":
        return f"failed: {state.data.tags.get(f'{TAG}error', '')[:200]}"
    return "unfinished (its driver was lost)"


def search_stage(ctx: StageContext, stage: Stage) -> dict[str, dict[str, Any]]:
    """Run one search stage over its cells with something to search; return the chosen values per cell
    (searched keys only). Failed cells go to ``ctx.failed``; finished ones are read from MLflow."""
    from ndebench.platform.engine.progress import MarkStopped, StageProgress
    from ndebench.platform.engine.searcher import CellSearcher, PerCellASHA
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
    sampler = {"tpe": f"Optuna TPE ({tc.n_startup_trials} random start-up trials)", "random": "random search",
               "grid": "the full grid"}[tc.sampler]
    ctx.say(f"stage {stage.name}: {run.trials} trial(s) over {len(run.cells)} cell(s), {sampler}, "
             f"{tc.metric} {tc.mode}" + (", ASHA early stopping" if tc.scheduler == "asha" else ""))
    if ctx.resume:
        reasons = {(c.label, ""): _search_rerun_reason(states.get(c.key)) for c in run.cells}
        ctx.say_reruns(reasons, 0)
    parents = {c.key: cell_run(ctx.tracking_uri, ctx.spec.study, ctx.study_run_id, stage.name, c.key,
                               ctx.cell_tags(c.cell)) for c in run.cells}
    resolved = [type(c)(c.cell, ctx.resolve(c.template), c.space, c.budget) for c in run.cells]
    searcher = CellSearcher(stage.name, resolved, tc)
    scheduler = None
    if tc.scheduler == "asha":
        scheduler = PerCellASHA(tc.metric, tc.mode, tc.asha,
                                {c.key: c.template["training.epochs"] for c in run.cells})
    progress = StageProgress(stage.name, {c.key: c.budget for c in run.cells}, {c.key: c.label for c in run.cells},
                             tc.metric, tc.mode, ctx.ray.say_console, ctx.progress_every_s)
    ctx.fit(stage.name, ctx.trainable_for(stage.name, parents), tune.TuneConfig(
        search_alg=searcher, scheduler=scheduler, num_samples=searcher.total, reuse_actors=True,
        # Also Ray's bound on pending trials (1 for a custom searcher without it): the cluster stays full.
        max_concurrent_trials=searcher.max_live, trial_dirname_creator=trial_dirname,
    ), {}, [progress, MarkStopped(ctx.tracking_uri)])
    ctx.close_orphans(stage.name, progress.outcomes)
    for cell in run.cells:
        outcomes = progress.outcomes[cell.key]
        ok = [o for o in outcomes if usable(o["result"], tc.metric)]
        if not ok:
            ctx.fail(cell.key, cell.label, parents[cell.key], stage.name, outcomes)
            continue
        pick = min if tc.mode == "min" else max
        best = pick(ok, key=lambda o: o["result"][tc.metric])
        chosen[cell.key] = {k: best["config"][k] for k in cell.space}
        finish_cell(ctx.tracking_uri, parents[cell.key], "done", params=chosen[cell.key], metrics={
            f"best_{tc.metric}": best["result"][tc.metric], "n_trials": len(outcomes), "n_ok": len(ok)})
    return chosen

def close_runs_of_a_lost_driver(ctx: StageContext) -> None:
    """Search trials an earlier driver left running: their cells restart, so the runs are closed as what
    happened (evaluate runs stay: their trials continue them)."""
    cause = ("driver lost: left running by an earlier `ndebench run` of this study that died or was "
             "interrupted; its cell restarts on --resume")
    for phase in ("base", "tune"):
        closed = close_orphaned_runs(ctx.tracking_uri, ctx.spec.study, phase, tags={"kind": "trial"},
                                     cause=cause)
        if closed:
            ctx.say(f"stage {phase}: {len(closed)} run(s) of an earlier driver that was lost closed as error")
