"""What a resumed sweep builds on, without Ray: searches continued from recorded trials, a deterministic choice,
``done`` only for a spent budget, interrupted runs continued, and reports that count
one finished run per (cell, seed)."""
import json
import time

import optuna
import pytest
from ndebench.platform.cli.main import main
from ndebench.platform.engine.searcher import CellSearcher
from ndebench.platform.engine.searchspace import Past, contains
from ndebench.platform.record.interruption import INTERRUPTION, mark_interrupted
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.searchtrials import IncompleteSearchError, finish_search_cell
from ndebench.platform.record.tracking import TAG, client, run_status, study_run
from ndebench.platform.spec.config import Space, parse_spec
from ndebench.platform.spec.plan import pick_best, plan_stages

COMPLETE, FAIL = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL
GRID = {"study": "g", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
        "regularizers": {"continuum_dropout": {"p": [0.1, 0.3], "m": [5, 10, 20]}}, "tune": {"sampler": "grid"}}
TPE = {"study": "t", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
       "regularizers": ["none"], "training": {"lr": {"loguniform": [1.0e-3, 1.0e-1]}},
       "tune": {"sampler": "tpe", "num_samples": 6, "n_startup_trials": 2}}


def _search(raw):
    stage, = plan_stages(parse_spec(raw))
    search, = [c for c in stage.cells if c.budget]
    return stage, search


def _drain(searcher):
    configs = []
    while (config := searcher.suggest(f"t{len(configs)}")) not in (None, CellSearcher.FINISHED):
        configs.append(config)
    return configs


def test_a_resumed_grid_runs_exactly_the_points_that_did_not_end():
    stage, search = _search(GRID)
    ended = [({"regularizer.p": 0.1, "regularizer.m": 5}, COMPLETE, 0.9),
             ({"regularizer.p": 0.3, "regularizer.m": 20}, FAIL, None)]
    searcher = CellSearcher("tune", [search], stage.tune, {search.key: Past(tuple(ended))})
    assert searcher.total == 4 and searcher.left == {search.key: 4}
    points = {(c["regularizer.p"], c["regularizer.m"]) for c in _drain(searcher)}
    assert points == {(0.1, 10), (0.1, 20), (0.3, 5), (0.3, 10)}


def test_a_resumed_tpe_search_asks_its_cut_off_trials_first_and_runs_only_what_is_left():
    stage, search = _search(TPE)
    ended = tuple(({"training.lr": lr}, COMPLETE, loss) for lr, loss in ((0.01, 0.5), (0.05, 0.7)))
    cut_off = ({"training.lr": 0.002},)
    searcher = CellSearcher("tune", [search], stage.tune, {search.key: Past(ended, cut_off)})
    assert searcher.total == 4
    first = searcher.suggest("a")
    assert first["training.lr"] == 0.002
    study = searcher._studies[search.key]
    assert [t.params["training.lr"] for t in study.trials if t.state == COMPLETE] == [0.01, 0.05]


def test_the_choice_does_not_depend_on_the_order_trials_ended():
    candidates = [({"p": 0.3, "m": 10}, 0.5), ({"p": 0.1, "m": 20}, 0.5), ({"p": 0.5, "m": 5}, 0.7)]
    assert pick_best(candidates, "min") == pick_best(candidates[::-1], "min") == {"m": 10, "p": 0.3}
    assert pick_best(candidates, "max") == {"p": 0.5, "m": 5}


def test_a_value_outside_the_search_space_is_not_a_point_of_it():
    assert contains(Space("choice", (5, 10)), 10) and not contains(Space("choice", (5, 10)), 20)
    assert contains(Space("loguniform", (1e-3, 1e-1)), 1e-2) and not contains(Space("uniform", (0.0, 1.0)), 1.5)
    assert contains(Space("randint", (1, 4)), 3) and not contains(Space("randint", (1, 4)), 4)
    assert not contains(Space("uniform", (0.0, 1.0)), "0.5")


def test_a_search_cell_is_done_only_once_its_budget_is_spent(uri):
    run_id = study_run(uri, "s", description="", params={}, yaml_text=None)
    with pytest.raises(IncompleteSearchError, match="2 of 3 trial"):
        finish_search_cell(uri, run_id, spent=2, budget=3, params={"training.lr": 0.01}, metrics={})
    assert run_status(client(uri).get_run(run_id)) == "running"
    finish_search_cell(uri, run_id, spent=3, budget=3, params={"training.lr": 0.01}, metrics={})
    assert client(uri).get_run(run_id).data.tags[f"{TAG}status"] == "done"


def _trial(uri, study, seed, regularizer="none", run_id=None, phase="evaluate"):
    identity = {"study": study, "phase": phase, "model": "neural_cde", "dataset": "synthetic",
                "regularizer": regularizer, "seed": str(seed), "cell": f"neural_cde__synthetic__{regularizer}"}
    return TrialRecorder(uri, study, {"regularizer": regularizer, "seed": seed}, f"{regularizer}-{seed}", identity,
                         run_id=run_id)


def test_interrupted_runs_are_closed_and_continued_into_the_same_run(uri):
    cut = _trial(uri, "i", 0)
    done = _trial(uri, "i", 1)
    done.finish("ok", {"test_accuracy": 0.5}, {}, {})
    assert mark_interrupted(uri, "i", "stopped by SIGTERM") == 1
    run = client(uri).get_run(cut.run_id)
    assert (run.info.status, run_status(run), run.data.tags[INTERRUPTION]) == ("KILLED", "interrupted",
                                                                               "stopped by SIGTERM")
    again = _trial(uri, "i", 0)  # the same config: its evaluate trial continues the interrupted run
    assert again.reattached and again.run_id == cut.run_id
    assert run_status(client(uri).get_run(cut.run_id)) == "running"


def test_a_stop_between_a_trials_result_and_its_mlflow_status_keeps_the_result(uri):
    """The stop came after the trial wrote its result (metrics, then the ``ok`` tag) and before MLflow's FINISHED."""
    from mlflow.entities import RunTag

    cut, caught = _trial(uri, "r", 0), _trial(uri, "r", 1)
    caught.log_metrics({"test_accuracy": 0.5})
    client(uri).log_batch(caught.run_id, tags=[RunTag(f"{TAG}status", "ok")])
    assert client(uri).get_run(caught.run_id).info.status == "RUNNING"
    assert mark_interrupted(uri, "r", "stopped by SIGINT") == 1
    run = client(uri).get_run(caught.run_id)
    assert (run.info.status, run_status(run), INTERRUPTION in run.data.tags) == ("FINISHED", "ok", False)
    assert run_status(client(uri).get_run(cut.run_id)) == "interrupted"


def test_a_report_counts_one_finished_run_per_cell_and_seed_and_lists_the_other(uri, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = {("none", 0): 0.60, ("none", 1): 0.62, ("continuum_dropout", 0): 0.70, ("continuum_dropout", 1): 0.72}
    for (regularizer, seed), accuracy in values.items():
        _trial(uri, "dup", seed, regularizer).finish("ok", {"test_accuracy": accuracy}, {"metric": "accuracy"}, {})
    # A second driver's duplicate of none / seed 0, started and finished later, with another value.
    time.sleep(0.05)
    duplicate = _trial(uri, "dup", 0)
    mlflow_client = client(uri)
    older = [r.info.run_id for r in mlflow_client.search_runs([duplicate.client.get_run(duplicate.run_id)
                                                                .info.experiment_id])
             if r.info.run_id != duplicate.run_id and r.data.tags[f"{TAG}regularizer"] == "none"
             and r.data.tags[f"{TAG}seed"] == "0"]
    duplicate.finish("ok", {"test_accuracy": 0.90}, {"metric": "accuracy"}, {})
    assert main(["report", "--study", "dup", "--tracking-uri", uri]) == 0
    summary = json.loads((tmp_path / "reports" / "dup" / "summary.json").read_text())
    cells = {c["regularizer"]: c for c in summary["tables"][0]["cells"]}
    assert cells["none"]["n"] == 2 and cells["none"]["mean"] == pytest.approx((0.90 + 0.62) / 2, abs=1e-12)
    assert summary["left_out_runs"] == [{"cell": "neural_cde__synthetic__none", "seed": 0, "run_id": older[0],
                                         "status": "ok", "counted_instead": duplicate.run_id,
                                         "reason": "a newer finished run of its (cell, seed) counts"}]
    text = (tmp_path / "reports" / "dup" / "table.md").read_text()
    assert "## Finished runs left out" in text
    assert f"| {older[0]} | ok | a newer finished run of its (cell, seed) counts | {duplicate.run_id} |" in text


def test_a_continued_random_search_does_not_propose_its_first_values_again():
    stage, search = _search({**TPE, "tune": {"sampler": "random", "num_samples": 4}})
    fresh = [c["training.lr"] for c in _drain(CellSearcher("tune", [search], stage.tune))]
    ran = tuple(({"training.lr": lr}, COMPLETE, 0.5) for lr in fresh[:2])
    continued = [c["training.lr"] for c in _drain(CellSearcher("tune", [search], stage.tune,
                                                               {search.key: Past(ran)}))]
    assert len(continued) == 2 and not set(continued) & set(fresh)


def test_an_evaluate_cell_is_done_only_when_every_planned_seed_ended(uri):
    from ndebench.platform.record.completeness import IncompleteEvaluationError, finish_evaluate_cell

    run_id = study_run(uri, "e", description="", params={}, yaml_text=None)
    with pytest.raises(IncompleteEvaluationError, match=r"seed\(s\) \[2\]"):
        finish_evaluate_cell(uri, run_id, planned=[0, 1, 2], ended=[0, 1], params={}, metrics={})
    assert run_status(client(uri).get_run(run_id)) == "running"
    finish_evaluate_cell(uri, run_id, planned=[0, 1, 2], ended=[2, 1, 0, 5], params={}, metrics={"n": 3.0})
    assert client(uri).get_run(run_id).data.tags[f"{TAG}status"] == "done"
