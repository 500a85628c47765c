"""Deletions in the MLflow UI (issue 31, item 6): a deleted study run or experiment is found before a sweep starts and
when a write of the driver meets it, and named in one line with how to restore it (exit 2: only a person can set
it right, a retry would meet it again); a deleted current run of a (cell, seed) brings its older attempt back and
``--resume`` runs the seed again (tests/test_current_config.py)."""
from __future__ import annotations

import re

import pytest
import yaml
from ndebench.platform.cli.main import main
from ndebench.platform.engine import evaluatestage
from ndebench.platform.record.deletions import check_not_deleted, deleted_error
from ndebench.platform.record.lease.fence import LeaseLostError
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import cell_run, client, finish_cell, search, study_run

SPEC = {"models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"], "model": {"hidden_size": 8},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}, "evaluate": {"seeds": [0]},
        "resources": {"cpu": 1}, "report": {"figures": "none"}}


def _args(tmp_path, study: str) -> list[str]:
    config = tmp_path / f"{study}.yaml"
    config.write_text(yaml.safe_dump({"study": study, **SPEC}))
    return ["run", str(config), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--storage-path", str(tmp_path / "ray"), "--out", str(tmp_path / "reports")]


def _error_lines(capsys) -> list[str]:
    """What the command wrote to stderr, without MLflow's own log lines (``2026/11/26 06:17:10 INFO ...``)."""
    return [line for line in capsys.readouterr().err.strip().splitlines()
            if not re.match(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARNING) ", line)]


def test_a_deleted_study_run_or_experiment_is_refused_before_ray_starts(tmp_path, uri, capsys):
    run_id = study_run(uri, "gone", description="", params={}, yaml_text=None)
    mlflow_client = client(uri)
    mlflow_client.delete_run(run_id)
    assert main([*_args(tmp_path, "gone"), "--resume"]) == 2
    assert _error_lines(capsys) == [
        f"ndebench run: error: study 'gone': its study run {run_id} is deleted in {uri}; restore it (`mlflow runs "
        f"restore --run-id {run_id}`, or the MLflow UI) and run again with --resume, or choose a new study name"]
    mlflow_client.restore_run(run_id)
    check_not_deleted(uri, "gone")

    experiment_id = mlflow_client.get_experiment_by_name("gone").experiment_id
    mlflow_client.delete_experiment(experiment_id)
    for resume in ([], ["--resume"]):
        assert main([*_args(tmp_path, "gone"), *resume]) == 2
        assert _error_lines(capsys) == [
            f"ndebench run: error: study 'gone': its MLflow experiment (id {experiment_id}) is deleted in {uri}; "
            f"restore it (`mlflow experiments restore --experiment-id {experiment_id}`, or the MLflow UI) and run "
            "again with --resume, or choose a new study name"]


def test_a_write_that_meets_a_deleted_run_names_it(uri):
    parent = study_run(uri, "w", description="", params={}, yaml_text=None)
    cell = cell_run(uri, "w", parent, "evaluate", "neural_cde__synthetic__none", {"model": "neural_cde"})
    client(uri).delete_run(cell)
    with pytest.raises(Exception, match="must be in the 'active' state") as caught:
        finish_cell(uri, cell, "done")
    assert f"its cell run (neural_cde__synthetic__none) {cell} is deleted" in str(deleted_error(caught.value, uri, "w"))
    assert deleted_error(ValueError("bad lr"), uri, "w") is None


def test_a_lost_lease_from_a_deleted_experiment_is_named_as_the_deleted_experiment(uri):
    """The lease's watcher may meet the deletion before a write does (its lease runs then read as deleted): the
    error names the experiment, as the write's would, not the lease; a lease lost otherwise stays what it is."""
    study_run(uri, "race", description="", params={}, yaml_text=None)
    lost = LeaseLostError("this driver lost its lease of study 'race' (epoch 1): its lease run x was deleted")
    assert deleted_error(lost, uri, "race") is None
    experiment_id = client(uri).get_experiment_by_name("race").experiment_id
    client(uri).delete_experiment(experiment_id)
    assert str(deleted_error(lost, uri, "race")).startswith(
        f"study 'race': its MLflow experiment (id {experiment_id}) is deleted in {uri}; restore it")


def _deleting(monkeypatch, delete) -> None:
    """``delete`` runs (as a person in the MLflow UI would) once the evaluate stage's trials have ended."""
    original = evaluatestage.mark_superseded

    def mark_superseded(uri: str, study: str) -> int:
        delete(client(uri), client(uri).get_experiment_by_name(study).experiment_id)
        return original(uri, study)

    monkeypatch.setattr(evaluatestage, "mark_superseded", mark_superseded)


@pytest.mark.system
def test_a_study_run_deleted_during_a_sweep_ends_it_in_one_line(tmp_path, uri, capsys, monkeypatch, local_ray):
    deleted = []

    def delete_study_run(mlflow_client, experiment_id):
        run, = search(uri, "live", f"tags.`{TAG}kind` = 'study'")
        mlflow_client.delete_run(run.info.run_id)
        deleted.append(run.info.run_id)

    _deleting(monkeypatch, delete_study_run)
    assert main(_args(tmp_path, "live")) == 2
    lines = _error_lines(capsys)
    assert lines[-1] == (
        f"ndebench run: error: study 'live': its study run {deleted[0]} is deleted in {uri}; restore it (`mlflow "
        f"runs restore --run-id {deleted[0]}`, or the MLflow UI) and run again with --resume, or choose a new study "
        "name"), lines
    assert not any("Traceback" in line for line in lines)


@pytest.mark.system
def test_an_experiment_deleted_during_a_sweep_ends_it_in_one_line(tmp_path, uri, capsys, monkeypatch, local_ray):
    ids = []

    def delete_experiment(mlflow_client, experiment_id):
        mlflow_client.delete_experiment(experiment_id)
        ids.append(experiment_id)

    _deleting(monkeypatch, delete_experiment)
    assert main(_args(tmp_path, "away")) == 2
    lines = _error_lines(capsys)
    assert lines[-1] == (
        f"ndebench run: error: study 'away': its MLflow experiment (id {ids[0]}) is deleted in {uri}; restore it "
        f"(`mlflow experiments restore --experiment-id {ids[0]}`, or the MLflow UI) and run again with --resume, or "
        "choose a new study name"), lines
    assert not any("Traceback" in line for line in lines)


@pytest.mark.system
def test_a_current_run_deleted_during_a_sweep_fails_its_cell_and_is_run_again(tmp_path, uri, capsys, monkeypatch,
                                                                                local_ray):
    deleted = []

    def delete_trial_run(mlflow_client, experiment_id):
        run, = search(uri, "lost", f"tags.`{TAG}kind` = 'trial'")
        mlflow_client.delete_run(run.info.run_id)
        deleted.append(run.info.run_id)

    _deleting(monkeypatch, delete_trial_run)
    assert main(_args(tmp_path, "lost")) == 1
    out = capsys.readouterr().out
    assert "evaluation incomplete: no run ended for seed(s) [0]; --resume runs them" in out
    assert out.strip().splitlines()[-1] == ("[ndebench] exit 1: 1 failed cell(s); 1 of 1 planned evaluate run(s) not "
                                            "ok (1 missing) (`ndebench run ... --resume` reruns them)")
    monkeypatch.undo()
    assert main([*_args(tmp_path, "lost"), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "rerun neural_cde x synthetic x none seed 0: no run yet" in out
    run, = search(uri, "lost", f"tags.`{TAG}kind` = 'trial'")
    assert run.info.run_id != deleted[0] and run.data.tags[f"{TAG}status"] == "ok"
