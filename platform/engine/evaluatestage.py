"""The ``evaluate`` stage: the chosen config of every cell for every seed in one Ray Tune grid, then each cell's
run closed with the statistics of its evaluate runs. Before the grid, the plan (each planned seed's config hash)
goes on every evaluate cell run, so that every reader counts the runs of this config
(:mod:`~ndebench.platform.record.completeness`). ``resume`` runs every planned (cell, seed) without a current
``ok`` run of its planned config (:func:`rerun_reason`); cut-off trials continue from their checkpoints.
"""
from __future__ import annotations

import math
from typing import Any

from ndebench.platform.common.choices import default_test
from ndebench.platform.common.labels import cell_label
from ndebench.platform.engine.provenance import driver_provenance
from ndebench.platform.engine.stacktrainable import member_outcomes, stack_trials, trial_owners
from ndebench.platform.engine.stages import StageContext, trial_dirname
from ndebench.platform.record.completeness import (
    attempts,
    current,
    finish_evaluate_cell,
    mark_superseded,
    read_plan,
    record_plan,
    seal_plan,
)
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.schema import (
    COUNTED_STATUSES,
    FINISHED_STATUSES,
    RESUMABLE_STATUSES,
    SUPERSEDED,
    TAG,
)
from ndebench.platform.record.store import client
from ndebench.platform.record.tracking import cell_run, cell_states, finish_cell, run_status, search
from ndebench.platform.spec.config import config_hash
from ndebench.platform.spec.plan import Cell, chosen_keys

CODE_TAGS = ("version", "git_commit", "git_dirty")


# An exception or the time limit in a stack ends every member of it; rerun stacked, one member's fault would again.
RERUN_ALONE = ("error", "timeout")


def rerun_reason(runs: list[Any], config_hash: str, code: dict[str, str], retry_diverged: bool) -> str | None:
    """Why a planned (cell, seed) with these earlier ``runs`` (oldest first) is run again, or ``None`` when its
    current run of ``config_hash`` stands: ``ok``, or ``diverged`` with the same ``code`` (the driver's
    :data:`CODE_TAGS`) unless ``retry_diverged``."""
    if not runs:
        return "no run yet"
    run = current(runs, config_hash)
    if run is None:
        return f"config changed since its {run_status(current(runs))} run"
    status, tags = run_status(run), run.data.tags
    if status in RESUMABLE_STATUSES:
        return f"cut off ({status}; continues its run from its last checkpoint)"
    if status == "ok":
        return None
    if status != "diverged":
        return f"its last run ended {status}"
    if any(tags.get(f"{TAG}{k}") != v for k, v in code.items()):
        return "diverged under other code"
    return "diverged, --retry-diverged" if retry_diverged else None


def evaluate(ctx: StageContext, cells: list[Cell], configs: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """Every planned (cell, seed) without a current ``ok`` run in one grid, then per-cell aggregates in MLflow."""
    from ndebench.platform.engine.progress import StageProgress
    from ndebench.platform.engine.searcher import LiveFIFOScheduler
    from ray import tune

    if ctx.resume:
        _refuse_unsafe_trial_dirs(ctx)
    found = attempts(ctx.tracking_uri, ctx.spec.study) if ctx.resume else {}
    code = {k: v for k, v in driver_provenance().items() if k in CODE_TAGS}
    trials, reasons, skipped, kept, alone = {}, {}, 0, 0, set()
    planned = {cell.key: {seed: config_hash(dict(configs[cell.key], phase="evaluate", seed=seed))
                          if cell.key in configs else None for seed in ctx.spec.evaluate.seeds} for cell in cells}
    for seed in ctx.spec.evaluate.seeds:  # seed-major, so that different cells share the cluster
        for cell in cells:
            if cell.key not in configs:
                continue
            config = dict(configs[cell.key], phase="evaluate", seed=seed)
            runs = found.get((cell.key, seed), [])
            why = rerun_reason(runs, planned[cell.key][seed], code, ctx.retry_diverged)
            if why is None:
                skipped += 1
                kept += run_status(current(runs, planned[cell.key][seed])) == "diverged"
            else:
                trials[f"{cell.key}#{seed}"] = config
                reasons[(cell.label, seed)] = why
                if runs and run_status(current(runs)) in RERUN_ALONE:
                    alone.add(f"{cell.key}#{seed}")
    states = cell_states(ctx.tracking_uri, ctx.spec.study, "evaluate") if ctx.resume else {}
    by_key = {c.key: c for c in cells}
    rerun_cells = {config["cell"] for config in trials.values()}
    parents, plan = {}, {state.info.run_id: {} for key, state in states.items() if key not in by_key}
    for cell in cells:
        state = states.get(cell.key)
        done = state is not None and state.data.tags.get(f"{TAG}status") == "done"
        # A done cell whose plan changed (a seed removed) has its statistics computed again.
        if (done and cell.key not in rerun_cells and cell.key not in ctx.failed
                and read_plan([state]) == {cell.key: planned[cell.key]}):
            continue
        run_id = cell_run(ctx.tracking_uri, ctx.spec.study, ctx.study_run_id, "evaluate", cell.key,
                          ctx.cell_tags(cell), {"fixed": dict(cell.fixed)} if cell.variant else None)
        plan[run_id] = planned[cell.key]
        if cell.key in ctx.failed:
            finish_cell(ctx.tracking_uri, run_id, "failed", error=ctx.failed[cell.key])
        else:
            parents[cell.key] = run_id
    record_plan(ctx.tracking_uri, plan)
    seal_plan(ctx.tracking_uri, ctx.spec.study, ctx.study_run_id)
    ctx.say(f"stage evaluate: {len(trials)} trial(s) over {len(rerun_cells)} cell(s), seeds "
             f"{list(ctx.spec.evaluate.seeds)}" + (f", {skipped} already recorded" if skipped else ""))
    if ctx.resume:
        ctx.say_reruns(reasons, kept)
    if alone and ctx.spec.resources.stack > 1:
        ctx.say(f"stage evaluate: {len(alone)} trial(s) whose last run ended {' or '.join(RERUN_ALONE)} train alone, "
                "not stacked, so that one trial's fault cannot end the others of a stack again")
    outcomes: dict[str, list[dict[str, Any]]] = {k: [] for k in parents}
    if trials:
        # A Tune trial per stack: a cell's seeds, its variants'.
        stacks = stack_trials(trials, ctx.spec.resources.stack, alone)
        owners = trial_owners(stacks, trials)
        budgets = {k: sum(cell == k for cell, _ in owners.values()) for k in parents}
        progress = StageProgress("evaluate", budgets, {k: by_key[k].label for k in parents}, None, "min",
                                 ctx.ray.say_console, ctx.progress_every_s, owners=owners)
        ctx.fit("evaluate", ctx.trainable_for("evaluate", parents, trials | stacks), tune.TuneConfig(
            reuse_actors=True, trial_dirname_creator=trial_dirname, scheduler=LiveFIFOScheduler()),
            {"trial": tune.grid_search(list(stacks))}, [progress])
        ran = member_outcomes(progress.outcomes, stacks, trials)
        ctx.close_orphans("evaluate", ran, trials)
        outcomes.update(ran)
    superseded = mark_superseded(ctx.tracking_uri, ctx.spec.study)
    if superseded:
        ctx.say(f"stage evaluate: {superseded} tag(s) {SUPERSEDED} set or cleared; reports count, per (cell, "
                "seed), the newest finished run of the current config")
    if trials:
        for outcome in (o for group in outcomes.values() for o in group if o["result"].get("resume_note")):
            ctx.say(f"stage evaluate: run {outcome['result'].get('run_id')}: {outcome['result']['resume_note']}")
    _aggregate(ctx, parents, by_key, outcomes)
    return len(trials), skipped

def _refuse_unsafe_trial_dirs(ctx: StageContext) -> None:
    """Unfinished evaluate runs whose ``ndebench.trial_dir`` tag leaves the storage root: say so and drop the
    tag, so that their trials start from scratch instead of reading whatever the tag names."""
    from ndebench.platform.engine.safepaths import UnsafePathError, trial_folder

    for run in search(ctx.tracking_uri, ctx.spec.study,
                      f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'"):
        trial_dir = run.data.tags.get(f"{TAG}trial_dir")
        if not trial_dir or run.data.tags.get(f"{TAG}status") in FINISHED_STATUSES:
            continue
        try:
            trial_folder(ctx.storage, ctx.spec.study, trial_dir)
        except UnsafePathError as exc:
            ctx.say(f"stage evaluate: run {run.info.run_id}: checkpoint path refused: {exc}; its trial starts "
                     "from scratch")
            client(ctx.tracking_uri).delete_tag(run.info.run_id, f"{TAG}trial_dir")

def _aggregate(ctx: StageContext, parents: dict[str, str], cells: dict[str, Cell],
               outcomes: dict[str, list[dict[str, Any]]]) -> None:
    """Close each evaluated cell's run: done (with the statistics :attr:`cell_statistics` computes from the study's
    evaluate runs as metrics, and the hyperparameters the sweep chose as params) only when every planned seed has
    a run that ended and one of them is ``ok``, else failed."""
    runs = evaluate_runs(ctx.tracking_uri, ctx.spec.study, with_calibration=False, variants=True)
    if runs.empty:
        runs = runs.reindex(columns=["model", "dataset", "regularizer", "variant", "label", "status", "seed"])
    named = {key: (cells[key].model, cells[key].dataset,
                   cell_label(cells[key].regularizer, dict(cells[key].fixed),
                              ctx.evaluated.get(key, {}).get("regularizer.scope")))
             for key in parents}
    test = ctx.spec.report.test or default_test(ctx.spec.protocol)
    stats = ctx.cell_statistics(runs, list(named.values()), test) if ctx.cell_statistics else {}
    for key, run_id in parents.items():
        model, dataset, name = named[key]
        mine = runs[(runs.model == model) & (runs.dataset == dataset) & (runs.label == name)]
        ended = set(mine.loc[mine["status"].isin(COUNTED_STATUSES), "seed"])
        unended = sorted(set(ctx.spec.evaluate.seeds) - ended)
        if unended:
            ctx.fail(key, cells[key].label, run_id, "evaluate", outcomes.get(key, []),
                     reason=f"evaluation incomplete: no run ended for seed(s) {unended}; --resume runs them")
            continue
        if not (mine["status"] == "ok").any():
            ctx.fail(key, cells[key].label, run_id, "evaluate", outcomes.get(key, []))
            continue
        values = stats.get(named[key], {})
        params = {k: ctx.evaluated[key][k] for k in chosen_keys(ctx.spec, cells[key])}
        finish_evaluate_cell(ctx.tracking_uri, run_id, planned=ctx.spec.evaluate.seeds, ended=ended, params=params,
                             metrics={k: v for k, v in values.items() if v is not None and math.isfinite(v)})
