"""Stacked search stages (``resources.stack`` on a tune stage): which cells stack, how the searcher deals a cell's
points into stacks and tells every member's outcome to its own Optuna trial, and how a stack's outcome names its
members' runs; the worker trains members that differ in more than the regularizer unstacked."""
import dataclasses

import optuna
import pytest
from ndebench.platform.engine.searcher import CellSearcher
from ndebench.platform.engine.searchstage import stack_sizes
from ndebench.platform.engine.stacktrainable import STACK, member_outcomes, stack_members
from ndebench.platform.engine.trainable import full_config
from ndebench.platform.spec.config import config_hash, parse_spec
from ndebench.platform.spec.plan import plan_stages
from ndebench.platform.worker.stack import run_stack
from test_stack import TRAINING, _spec

COMPLETE, FAIL = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL
GRID = {"study": "g", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
        "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": [5, 10, 20]}},
        "tune": {"sampler": "grid"}}


def _stage(**changes):
    stage, = plan_stages(parse_spec(GRID | changes))
    return stage


def _cd(stage):
    return next(c for c in stage.cells if c.cell.regularizer == "continuum_dropout")


def _drain(searcher):
    configs = {}
    while (config := searcher.suggest(f"t{len(configs)}")) not in (None, CellSearcher.FINISHED):
        configs[f"t{len(configs)}"] = config
    return configs


def test_only_cells_whose_points_differ_in_the_regularizer_alone_stack_and_never_under_asha_or_tpe():
    stage = _stage()
    assert stack_sizes(stage, 1) == ({}, "")
    sizes, line = stack_sizes(stage, 4)
    assert sizes == {_cd(stage).key: 4} and "stacked" in line
    assert stack_sizes(_stage(training={"lr": [0.01, 0.1]}), 4)[0] == {}
    sizes, line = stack_sizes(_stage(tune={"sampler": "grid", "scheduler": "asha"}), 4)
    assert sizes == {} and "not applied: ASHA" in line
    sizes, line = stack_sizes(_stage(tune={"sampler": "tpe"}), 4)
    assert sizes == {} and "not applied: TPE proposes each point from the trials ended before it" in line
    assert stack_sizes(_stage(tune={"sampler": "random"}), 4)[0] == {_cd(_stage()).key: 4}


def test_a_grid_is_dealt_into_stacks_and_each_member_is_told_its_own_outcome():
    stage = _stage()
    cell = _cd(stage)
    searcher = CellSearcher("tune", [cell], stage.tune, stack={cell.key: 4})
    assert searcher.total == 6 and searcher.tune_trials == {cell.key: 2} and searcher.max_live == 2
    configs = _drain(searcher)
    assert [len(c[STACK]) for c in configs.values()] == [4, 2]
    points = [(v["regularizer.p"], v["regularizer.m"]) for c in configs.values() for v in c[STACK]]
    assert sorted(points) == sorted((p, m) for p in (0.1, 0.3) for m in (5, 10, 20))
    first, second = configs.values()
    losses = {(v["regularizer.p"], v["regularizer.m"]): 1.0 + i for i, v in enumerate(first[STACK])}
    members = [{"status": "ok", "val_loss": losses[(v["regularizer.p"], v["regularizer.m"])]} for v in first[STACK]]
    members[1] = {"status": "diverged", "val_loss": float("inf")}
    searcher.on_trial_complete("t0", {"status": "diverged", "members": members})
    searcher.on_trial_complete("t1", {"status": "error"}, error=True)
    told = {(t.params["regularizer.p"], t.params["regularizer.m"]): (t.state, t.value)
            for t in searcher._studies[cell.key].trials}
    for i, v in enumerate(first[STACK]):
        point = (v["regularizer.p"], v["regularizer.m"])
        assert told[point] == ((FAIL, None) if i == 1 else (COMPLETE, losses[point]))
    assert all(told[(v["regularizer.p"], v["regularizer.m"])][0] == FAIL for v in second[STACK])


def test_a_stack_is_never_larger_than_the_cell_s_concurrency_limit():
    stage = _stage(tune={"sampler": "grid", "max_concurrent": 2})
    cell = _cd(stage)
    searcher = CellSearcher("tune", [cell], stage.tune, stack={cell.key: 4})
    assert searcher.stacked == {cell.key: 2} and searcher.tune_trials == {cell.key: 3}
    assert len(searcher.suggest("a")[STACK]) == 2 and searcher.suggest("b") is None


def test_a_search_stack_s_members_are_the_configs_and_runs_of_its_points_alone():
    stage = _stage()
    cell = _cd(stage)
    templates = {cell.key: dict(cell.template)}
    searcher = CellSearcher("tune", [cell], stage.tune, stack={cell.key: 3})
    stack = searcher.suggest("a")
    members = stack_members(stack, None, templates)
    alone = [full_config({"cell": cell.key, **v, "phase": "tune", "seed": 0}, None, templates) for v in stack[STACK]]
    assert members == alone and len({config_hash(c) for c in members}) == 3
    outcomes = member_outcomes({cell.key: [{"config": stack, "result": {}, "error": "worker lost"}]})[cell.key]
    assert [config_hash(full_config(o["config"], None, templates)) for o in outcomes] == [config_hash(c)
                                                                                          for c in alone]


def test_members_that_differ_in_more_than_the_regularizer_train_one_after_another():
    specs = [_spec(0), _spec(0, training=dataclasses.replace(TRAINING, lr=0.02, epochs=2))]
    notes = []
    run_stack(specs, evaluate_test=False, note=notes.append)
    assert len(notes) == 1 and "differ in more than their seeds and regularizer hyperparameters: training" in notes[0]


@pytest.mark.parametrize("seed,params", [(0, {"p": 0.5, "m": 50}), (3, {"p": 0.3, "m": 10})])
def test_members_that_differ_in_their_seed_or_regularizer_hyperparameters_stack(seed, params):
    fixed = dataclasses.replace(TRAINING, epochs=1)
    notes = []
    run_stack([_spec(0, training=fixed), _spec(seed, training=fixed, regularizer_params=params)],
              evaluate_test=False, note=notes.append)
    assert notes == []


def test_a_search_stack_s_progress_line_lists_its_members_and_its_best_member_counts():
    from types import SimpleNamespace

    from ndebench.platform.engine.progress import StageProgress

    lines = []
    view = StageProgress("tune", {"a": 1}, {"a": "A"}, "val_loss", "max", lines.append, bar=False)
    config = {"cell": "a", STACK: [{"regularizer.p": 0.1}, {"regularizer.p": 0.3}, {"regularizer.p": 0.5}],
              "phase": "tune", "seed": 0}
    members = [{"status": "ok", "val_loss": 0.4}, {"status": "ok", "val_loss": 0.7},
               {"status": "diverged", "val_loss": 0.9}]
    trial = SimpleNamespace(trial_id="t", config=config, last_result={"status": "diverged", "members": members})
    view.on_trial_start(0, [], trial)
    view.on_trial_complete(0, [], trial)
    assert lines[0].startswith("  tune 1/1: A [p=0.1 | p=0.3 | p=0.5]: val_loss 0.7000, diverged, ")
    assert view.best == {"a": 0.7} and lines[1] == "  tune done: A (1 trial(s), best val_loss 0.7000)"


def test_the_variants_of_a_regularizer_stack_with_its_tuned_cell_and_other_settings_never_do():
    from ndebench.platform.engine.stacktrainable import stack_trials, trial_owners

    base = {"study": "s", "model": "neural_cde", "dataset": "synthetic", "regularizer": "continuum_dropout",
            "model.hidden_size": 8, "phase": "evaluate"}
    cells = {"cd": {"regularizer.p": 0.3}, "cd[p=0.1]": {"regularizer.p": 0.1, "variant": "cd[p=0.1]"},
             "none": {"regularizer": "none"}, "cd[h=16]": {"model.hidden_size": 16, "variant": "cd[h=16]"}}
    trials = {f"{cell}#{seed}": base | extra | {"cell": cell, "seed": seed}
              for seed in (0, 1) for cell, extra in cells.items()}
    stacks = stack_trials(trials, 3)
    assert {k: v.get(STACK) for k, v in stacks.items()} == {
        "cd#0+0+1": ["cd#0", "cd[p=0.1]#0", "cd#1"], "cd[p=0.1]#1": None, "none#0+1": ["none#0", "none#1"],
        "cd[h=16]#0+1": ["cd[h=16]#0", "cd[h=16]#1"]}
    alone = stack_trials(trials, 3, alone={"cd#1", "none#0"})
    assert {k: v.get(STACK) for k, v in alone.items()} == {
        "cd#1": None, "none#0": None, "cd#0+0+1": ["cd#0", "cd[p=0.1]#0", "cd[p=0.1]#1"], "none#1": None,
        "cd[h=16]#0+1": ["cd[h=16]#0", "cd[h=16]#1"]}
    outcome = {"config": {"cell": "cd", "trial": "cd#0+0+1"}, "result": {"status": "ok"}, "error": ""}
    members = member_outcomes({"cd": [outcome], "cd[p=0.1]": []}, stacks, trials)
    assert {cell: [o["config"]["trial"] for o in group] for cell, group in members.items()} == {
        "cd": ["cd#0", "cd#1"], "cd[p=0.1]": ["cd[p=0.1]#0"]}
    # The progress view counts and names each Tune trial by its members' configs, never by splitting its key.
    assert trial_owners(stacks, trials) == {"cd#0+0+1": ("cd", "0+0+1"), "cd[p=0.1]#1": ("cd[p=0.1]", "1"),
                                            "none#0+1": ("none", "0+1"), "cd[h=16]#0+1": ("cd[h=16]", "0+1")}
