"""MLflow bookkeeping under partial failure: orphaned runs, reports while a sweep runs, concurrent creation."""
import subprocess
import sys

import pytest
from fakes import record_trial
from ndebench.platform.cli.main import main
from ndebench.platform.record.runs import evaluate_runs, planned_seeds, runs_frame
from ndebench.platform.record.schema import RESULTS_COLUMNS, STATUSES
from ndebench.platform.record.tracking import (
    MLFLOW_STATUS,
    RESULT_LEASE,
    TAG,
    client,
    close_orphaned_runs,
    run_status,
    search,
)
from ndebench.platform.report.report import primary_metrics

STUDY = "crafted"


def _record(uri, regularizer, seed, status=None, metrics=None, tags=None, phase="evaluate"):
    """One trial's MLflow run; ``status=None`` leaves it running, as a worker killed mid-trial does."""
    return record_trial(uri, STUDY, regularizer, seed, phase=phase, metric=None,
                        config_hash=f"{phase}-{regularizer}-{seed}", epochs=[{"train_loss": 1.0}], status=status,
                        metrics=metrics, tags=tags).run_id


@pytest.fixture
def crafted(tmp_path, uri, monkeypatch):
    """A study mid-sweep: seeds 0-1 of both cells ok, ``none`` seed 2 running (its worker died), the
    Continuum Dropout seed 2 diverged, seed 3 of both never opened a run; four seeds planned."""
    monkeypatch.chdir(tmp_path)
    for seed in (0, 1):
        for regularizer, accuracy in (("none", 0.6), ("continuum_dropout", 0.7)):
            _record(uri, regularizer, seed, "ok", {"test_accuracy": accuracy + 0.01 * seed})
    orphan = _record(uri, "none", 2)
    _record(uri, "continuum_dropout", 2, "diverged", tags={"message": "loss is nan at epoch 1"})
    tune_orphan = _record(uri, "none", 0, phase="tune")
    mlflow_client = client(uri)
    experiment = mlflow_client.get_experiment_by_name(STUDY).experiment_id
    study_run = mlflow_client.create_run(experiment, tags={f"{TAG}kind": "study"}, run_name="study")
    mlflow_client.log_param(study_run.info.run_id, "evaluate.seeds", "[0, 1, 2, 3]")
    return uri, orphan, tune_orphan


def test_report_while_running_then_orphans_closed_as_error_with_the_reason(crafted, tmp_path, capsys):
    uri, orphan, tune_orphan = crafted
    runs = evaluate_runs(uri, STUDY)
    assert runs.set_index("run_id").loc[orphan, "status"] == "running"
    assert planned_seeds(uri, STUDY) == [0, 1, 2, 3]
    assert main(["report", "--study", STUDY, "--tracking-uri", uri]) == 0
    assert "1 running" in capsys.readouterr().out
    table_md = tmp_path / "reports" / STUDY / "table.md"
    text = table_md.read_text()
    assert "6 evaluate-phase runs: 4 ok, 1 diverged, 0 error, 1 running." in text
    assert "[1 running (seed 2); no run for seed 3]" in text
    # The paired differences of seeds 0 and 1 are both 0.1: the paired test flags the cell's zero variance.
    assert "[1 diverged; no run for seed 3; zero variance]" in text

    # The end of the phase: the dead worker's run is closed with what Ray said about the trial.
    reason = RuntimeError("The actor died unexpectedly before finishing this task.\n(more detail)")
    assert close_orphaned_runs(uri, STUDY, "evaluate", {"evaluate-none-2": reason}) == [orphan]
    run = client(uri).get_run(orphan)
    assert run.info.status == "FAILED" and run.data.tags[f"{TAG}status"] == "error"
    assert run.data.tags[f"{TAG}error"].startswith(
        "the worker running this trial died before recording an outcome: RuntimeError: The actor died "
        "unexpectedly before finishing this task.; closed by the sweep driver at the end of the evaluate phase")
    assert close_orphaned_runs(uri, STUDY, "evaluate") == []
    assert close_orphaned_runs(uri, STUDY, "tune", tags={"regularizer": "continuum_dropout"}) == []
    assert close_orphaned_runs(uri, STUDY, "tune", tags={"regularizer": "none"}) == [tune_orphan]
    assert main(["report", "--study", STUDY, "--tracking-uri", uri]) == 0
    capsys.readouterr()
    text = table_md.read_text()
    assert "4 ok, 1 diverged, 1 error." in text
    assert "neural_cde / synthetic / none, seed 2: error: the worker running this trial died" in text


def test_a_study_whose_runs_all_diverged_gets_a_report(tmp_path, uri, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for seed in range(2):
        for regularizer in ("none", "continuum_dropout"):
            _record(uri, regularizer, seed, "diverged", tags={"message": f"loss is nan at epoch {seed + 1}"})
    assert main(["report", "--study", STUDY]) == 0
    out = capsys.readouterr().out
    assert "0 ok, 4 diverged, 0 error." in out and "seed 1: diverged: loss is nan at epoch 2" in out
    text = (tmp_path / "reports" / STUDY / "table.md").read_text()
    assert "No evaluate-phase run finished ok with a test metric" in text


def test_fresh_database_created_by_concurrent_processes(uri):
    code = ("import sys; from ndebench.platform.record.tracking import ensure_experiment; "
            "print(ensure_experiment(sys.argv[1], 'race'))")
    procs = [subprocess.Popen([sys.executable, "-c", code, uri], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    assert len({out.strip() for out, _ in results}) == 1


def test_runs_have_short_names_and_the_experiment_opens_in_the_model_training_view(uri):
    from ndebench.platform.record.tracking import ensure_experiment, run_name, study_run

    assert run_name({"regularizer": "continuum_dropout", "regularizer.p": 0.3, "regularizer.m": 10,
                     "regularizer.n_mc": 5, "phase": "evaluate", "seed": 0}) == "cd m=10 p=0.3 s0"
    assert run_name({"regularizer": "none", "phase": "base", "training.lr": 0.003,
                     "seed": 2}) == "base none lr=0.003 s2"
    study_run(uri, "named", description="what the study asks", params={}, yaml_text=None)
    experiment = client(uri).get_experiment(ensure_experiment(uri, "named"))
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert experiment.tags["mlflow.note.content"] == "what the study asks"


def test_the_registered_metric_tag_is_the_metric_column_and_picks_the_primary_metric(uri):
    scores = {"test_accuracy": 0.6, "test_auroc": 0.7}
    tagged = [_record(uri, r, 0, "ok", scores, tags={"metric": "accuracy"}) for r in ("none", "continuum_dropout")]
    older = _record(uri, "none", 1, "ok", scores)
    runs = evaluate_runs(uri, STUDY, with_calibration=False)
    assert tuple(runs.columns[:len(RESULTS_COLUMNS)]) == RESULTS_COLUMNS
    metric_of = runs.set_index("run_id")["metric"].to_dict()
    assert metric_of == {tagged[0]: "accuracy", tagged[1]: "accuracy", older: ""}
    frame = runs_frame(uri, STUDY, histories=False)
    assert frame.set_index("run_id")["metric"].to_dict() == metric_of
    # The registration says accuracy although the runs report AUROC; a study recorded before the tag
    # existed falls back to the columns, where AUROC marks a binary task.
    assert primary_metrics(runs) == {"synthetic": "test_accuracy"}
    assert primary_metrics(runs[runs["run_id"] == older]) == {"synthetic": "test_auroc"}


def test_statuses_read_from_mlflow_are_the_schema_statuses():
    assert set(MLFLOW_STATUS.values()) <= set(STATUSES)


def test_orphans_are_found_by_query_exactly_as_a_full_read_finds_them(uri):
    """The end of a stage fetches only the runs that can read as running: a ``running`` status tag, or none and
    MLflow's RUNNING; a running-tagged run whose result came from a driver that lost the study stays as it is."""
    tagged = _record(uri, "none", 0)
    _record(uri, "none", 1, "ok", {"test_accuracy": 0.5})
    mlflow_client = client(uri)
    experiment = mlflow_client.get_experiment_by_name(STUDY).experiment_id
    identity = {f"{TAG}phase": "evaluate", f"{TAG}kind": "trial"}
    untagged = mlflow_client.create_run(experiment, tags=identity).info.run_id
    ended = mlflow_client.create_run(experiment, tags=identity).info.run_id
    mlflow_client.set_terminated(ended, "FINISHED")
    superseded = _record(uri, "none", 2)
    mlflow_client.set_tag(superseded, f"{TAG}lease", "2")
    mlflow_client.set_tag(superseded, f"{TAG}{RESULT_LEASE}", "1")
    expected = {r.info.run_id for r in search(uri, STUDY, f"tags.`{TAG}phase` = 'evaluate'")
                if run_status(r) == "running"}
    assert expected == {tagged, untagged}
    assert sorted(close_orphaned_runs(uri, STUDY, "evaluate")) == sorted(expected)
    assert {run_status(mlflow_client.get_run(r)) for r in expected} == {"error"}
    assert run_status(mlflow_client.get_run(superseded)) == "interrupted"
