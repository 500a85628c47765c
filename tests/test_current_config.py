"""The run that counts is the run of the current config (issue 31, item 1): every reader (reports, cell statistics,
resume, exit status) takes per (cell, seed) the finished run of the config hash the latest sweep planned; runs of
another config, of a removed seed or cell, are left out with why. Unit tests build the run record by hand (no Ray);
the system test is the reviewed scenario: an Euler sweep, then a resume under dopri5 whose rerun fails."""
from __future__ import annotations

import contextlib
import io
import json
import time

import pytest
import yaml
from ndebench.platform.cli.main import main
from ndebench.platform.engine.evaluatestage import rerun_reason
from ndebench.platform.record.completeness import (
    attempts,
    left_out_finished,
    mark_superseded,
    not_ok_summary,
    planned_statuses,
    record_plan,
)
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.schema import PLANNED_SEEDS, SUPERSEDED, TAG
from ndebench.platform.record.tracking import cell_run, client, search, study_run

NONE, CD = "neural_cde__synthetic__none", "neural_cde__synthetic__continuum_dropout"


def _study(uri: str, study: str, seeds: list[int]) -> str:
    return study_run(uri, study, description="", params={"evaluate.seeds": json.dumps(seeds)}, yaml_text=None)


def _cell(uri: str, study: str, parent: str, key: str, planned: dict[int, str | None]) -> str:
    regularizer = key.rsplit("__", 1)[1]
    run_id = cell_run(uri, study, parent, "evaluate", key,
                      {"model": "neural_cde", "dataset": "synthetic", "regularizer": regularizer})
    record_plan(uri, {run_id: planned})
    return run_id


def _trial(uri: str, study: str, key: str, seed: int, config_hash: str, status: str, value: float | None = None) -> str:
    """A finished evaluate trial run of (``key``, ``seed``) under ``config_hash``; started after the previous one."""
    time.sleep(0.02)  # attempts are ordered by start time (milliseconds)
    tags = {"study": study, "phase": "evaluate", "model": "neural_cde", "dataset": "synthetic",
            "regularizer": key.rsplit("__", 1)[1], "seed": str(seed), "cell": key, "metric": "accuracy"}
    recorder = TrialRecorder(uri, study, {"seed": seed}, config_hash, tags)
    metrics = {"test_accuracy": value} if value is not None else {}
    recorder.finish(status, metrics, {"num_classes": 2} if value is not None else {"error": f"{status} here"}, {})
    return recorder.run_id


def _tags(uri: str, run_id: str) -> dict[str, str]:
    return client(uri).get_run(run_id).data.tags


def test_a_rerun_that_timed_out_counts_not_an_older_success_of_another_config(uri):
    parent = _study(uri, "t", [0])
    _cell(uri, "t", parent, NONE, {0: "new"})
    old = _trial(uri, "t", NONE, 0, "old", "ok", 0.8)
    new = _trial(uri, "t", NONE, 0, "new", "timeout")
    # What the old reader wrote: the new run superseded by the older success of the other config.
    client(uri).set_tag(new, SUPERSEDED, old)

    frame = evaluate_runs(uri, "t", with_calibration=False)
    assert list(zip(frame.run_id, frame.status, strict=True)) == [(new, "timeout")]
    assert not_ok_summary(planned_statuses(uri, "t", [NONE], [0])) == (
        "1 of 1 planned evaluate run(s) not ok (1 timeout)")
    assert left_out_finished(uri, "t") == [{"cell": NONE, "seed": 0, "run_id": old, "status": "ok",
                                            "counted_instead": new,
                                            "reason": "config changed: hash old, the current config's is new"}]
    assert mark_superseded(uri, "t") == 2 and mark_superseded(uri, "t") == 0
    assert _tags(uri, old)[SUPERSEDED] == new and SUPERSEDED not in _tags(uri, new)
    runs = attempts(uri, "t")[(NONE, 0)]
    assert rerun_reason(runs, "new", {}, False) == "its last run ended timeout"
    # Back to the old config: its success counts again, nothing is rerun.
    assert rerun_reason(runs, "old", {}, False) is None
    assert rerun_reason(runs, "third", {}, False) == "config changed since its ok run"


def test_runs_of_a_removed_seed_or_cell_are_left_out_of_every_reader(uri, tmp_path, monkeypatch):
    parent = _study(uri, "r", [0, 1, 2])
    values = {(NONE, 0): 0.60, (NONE, 1): 0.64, (NONE, 2): 0.99, (CD, 0): 0.91, (CD, 1): 0.93}
    runs = {key: _trial(uri, "r", key[0], key[1], f"{key[0]}#{key[1]}", "ok", value) for key, value in values.items()}
    # The config now plans seeds 0 and 1 of `none` only: seed 2 and the continuum_dropout cell are gone.
    _cell(uri, "r", parent, NONE, {0: f"{NONE}#0", 1: f"{NONE}#1"})
    _cell(uri, "r", parent, CD, {})
    client(uri).set_tag(parent, PLANNED_SEEDS, "[0, 1]")

    frame = evaluate_runs(uri, "r", with_calibration=False)
    assert sorted(frame.run_id) == sorted([runs[(NONE, 0)], runs[(NONE, 1)]])
    assert planned_statuses(uri, "r", [NONE], [0, 1]) == {(NONE, 0): "ok", (NONE, 1): "ok"}
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--study", "r", "--tracking-uri", uri]) == 0
    summary = json.loads((tmp_path / "reports" / "r" / "summary.json").read_text())
    cell, = summary["tables"][0]["cells"]
    assert cell["regularizer"] == "none" and cell["n"] == 2 and cell["mean"] == pytest.approx(0.62, abs=1e-12)
    reasons = {(r["cell"], r["seed"]): (r["run_id"], r["counted_instead"], r["reason"])
               for r in summary["left_out_runs"]}
    assert reasons == {(NONE, 2): (runs[(NONE, 2)], "", "seed 2 is not in the current config's evaluate.seeds"),
                       (CD, 0): (runs[(CD, 0)], "", "its cell is not in the current config"),
                       (CD, 1): (runs[(CD, 1)], "", "its cell is not in the current config")}
    text = (tmp_path / "reports" / "r" / "table.md").read_text()
    removed = f"| {NONE} | 2 | {runs[(NONE, 2)]} | ok | seed 2 is not in the current config's evaluate.seeds | none |"
    assert removed in text
    # Nothing of another plan is marked superseded: no run of the current plan replaced them.
    assert mark_superseded(uri, "r") == 0


def test_a_deleted_current_run_brings_back_its_older_attempt_and_the_seed_is_rerun(uri):
    parent = _study(uri, "d", [0])
    _cell(uri, "d", parent, NONE, {0: "h"})
    failed = _trial(uri, "d", NONE, 0, "h", "error")
    retried = _trial(uri, "d", NONE, 0, "h", "ok", 0.7)
    assert mark_superseded(uri, "d") == 1 and _tags(uri, failed)[SUPERSEDED] == retried
    client(uri).delete_run(retried)  # in the MLflow UI

    frame = evaluate_runs(uri, "d", with_calibration=False)
    assert list(zip(frame.run_id, frame.status, strict=True)) == [(failed, "error")]  # the seed is not dropped
    assert planned_statuses(uri, "d", [NONE], [0]) == {(NONE, 0): "error"}
    assert rerun_reason(attempts(uri, "d")[(NONE, 0)], "h", {}, False) == "its last run ended error"
    assert mark_superseded(uri, "d") == 1 and SUPERSEDED not in _tags(uri, failed)


SPEC = {"study": "solver", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "model": {"hidden_size": 8}, "solver": {"method": "euler"},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}, "evaluate": {"seeds": [0]},
        "resources": {"cpu": 1}, "report": {"figures": "none"}}


def _run(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    return code, out.getvalue()


@pytest.mark.system
def test_a_resume_under_another_config_reports_its_failed_rerun_and_exits_1(tmp_path, uri, local_ray):
    config = tmp_path / "solver.yaml"
    config.write_text(yaml.safe_dump(SPEC))
    args = ["run", str(config), "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray"),
            "--out", str(tmp_path / "reports")]
    code, out = _run(args)
    assert code == 0, out
    euler, = [r.info.run_id for r in search(uri, "solver", f"tags.`{TAG}kind` = 'trial'")]

    code, out = _run([*args, "--resume", "--set", "solver.method=dopri5", "--set", "solver.max_steps=1"])
    assert code == 1, out
    assert "rerun neural_cde x synthetic x none seed 0: config changed since its ok run" in out
    assert out.strip().splitlines()[-1] == ("[ndebench] exit 1: 1 failed cell(s); 1 of 1 planned evaluate run(s) not "
                                             "ok (1 error) (`ndebench run ... --resume` reruns them)")
    rerun, = [r.info.run_id for r in search(uri, "solver", f"tags.`{TAG}kind` = 'trial'") if r.info.run_id != euler]
    assert SUPERSEDED not in _tags(uri, rerun) and _tags(uri, euler)[SUPERSEDED] == rerun
    report = tmp_path / "reports" / "solver"
    results = (report / "results.csv").read_text().splitlines()
    assert len(results) == 2 and rerun in results[1] and ",error," in results[1]
    table = (report / "table.md").read_text()
    assert "neural_cde / synthetic / none, seed 0: error: StepLimitError" in table
    left_out, = json.loads((report / "summary.json").read_text())["left_out_runs"]
    assert (left_out["run_id"], left_out["status"], left_out["counted_instead"]) == (euler, "ok", rerun)
    assert left_out["reason"].startswith("config changed: hash ")
    assert f"| {euler} | ok | config changed: hash " in table

    # Back to Euler: its run is the current config's again, and a deleted current run is run again.
    code, out = _run([*args, "--resume"])
    assert code == 0 and "stage evaluate: 0 trial(s) over 0 cell(s), seeds [0], 1 already recorded" in out, out
    assert SUPERSEDED not in _tags(uri, euler) and _tags(uri, rerun)[SUPERSEDED] == euler
    client(uri).delete_run(euler)
    code, out = _run([*args, "--resume"])
    assert code == 0 and "rerun neural_cde x synthetic x none seed 0: config changed since its error run" in out, out
    frame = evaluate_runs(uri, "solver", with_calibration=False)
    assert len(frame) == 1 and frame.status[0] == "ok" and frame.run_id[0] not in (euler, rerun)
