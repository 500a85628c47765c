"""Outages are outages, on real sweeps: an MLflow 5xx storm or a full disk inside a trial (injected in the Ray
worker through a ``plugins:`` module) ends in a Ray retry from the trial's checkpoint that then succeeds, or, when
every retry fails the same way, in exit 3 naming the failure with the run closed ``interrupted`` (``--resume``
continues it), never in an ``error`` run counted in a table."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fakes import write_fault_plugin
from ndebench.platform.record.completeness import planned_statuses
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import client, search

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("one_cpu_ray")]

CONFIG = {"study": "outage", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
          "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]}, "plugins": ["faultplugin"],
          "training": {"epochs": 4, "min_epochs": 4, "patience": 4, "lr": 0.01}, "tune": {"max_failures": 1}}
CELL = "neural_cde__synthetic__none"


def _run(folder: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ndebench.platform", "run", "outage.yaml", *flags], cwd=folder,
                          capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(folder)})


def _evaluate_run(uri: str):
    runs = search(uri, "outage", f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'")
    assert len(runs) == 1, [r.data.tags.get(f"{TAG}status") for r in runs]
    return client(uri).get_run(runs[0].info.run_id)


def _steps_once(uri: str, run_id: str) -> None:
    for metric in ("train_loss", "val_loss"):
        steps = sorted(m.step for m in client(uri).get_metric_history(run_id, metric) if m.step)
        assert steps == [1, 2, 3, 4], metric


def test_outages_inside_a_trial_are_each_retried_from_its_checkpoint(tmp_path, uri):
    """An MLflow 5xx storm at epoch 2 and a full disk at epoch 3 of the same trial: each ends its attempt, and
    Ray's retries restore the checkpoints of epochs 1 and 2 into the same run, which ends ``ok``."""
    (tmp_path / "outage.yaml").write_text(yaml.safe_dump(dict(CONFIG, tune={"max_failures": 2})))
    state = write_fault_plugin(tmp_path, {"storm": 2, "enospc": 3})
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(path.name for path in state.glob("fired-*")) == ["fired-enospc", "fired-storm"]
    # The first attempt started from nothing; Ray's retries restored the checkpoints of epochs 1 and 2.
    assert (state / "attempts").read_text().split() == ["0", "1", "2"]
    run = _evaluate_run(uri)
    assert run.data.tags[f"{TAG}status"] == "ok" and run.info.status == "FINISHED"
    _steps_once(uri, run.info.run_id)
    assert not search(uri, "outage", f"tags.`{TAG}status` = 'error'")


def test_an_outage_that_outlasts_the_retries_exits_3_and_resume_continues_the_run(tmp_path, uri):
    (tmp_path / "outage.yaml").write_text(yaml.safe_dump(CONFIG))
    state = write_fault_plugin(tmp_path, {"enospc": 3}, forever=True)
    failed = _run(tmp_path)
    output = failed.stdout + failed.stderr
    assert failed.returncode == 3, output
    last = failed.stdout.strip().splitlines()[-1]
    assert last.startswith("[ndebench] exit 3: 1 trial(s) stopped by an infrastructure failure after their retries "
                           "(--resume continues them): disk full: cannot write "), last
    assert "/trial_state.pt" in last and "Traceback" not in failed.stdout
    assert (state / "attempts").read_text().split() == ["0", "2"]
    run = _evaluate_run(uri)
    assert run.data.tags[f"{TAG}status"] == "interrupted" and run.info.status == "KILLED"
    assert run.data.tags[f"{TAG}interruption"].startswith("infrastructure failure: disk full: cannot write ")
    assert planned_statuses(uri, "outage", [CELL], [0]) == {(CELL, 0): "interrupted"}
    assert not search(uri, "outage", f"tags.`{TAG}status` = 'error'")
    table = (tmp_path / "reports" / "outage" / "table.md").read_text()
    assert "0 error, 1 interrupted" in table and "seed 0: interrupted" in table, table

    (state / "off").touch()
    resumed = _run(tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = _evaluate_run(uri)
    assert again.info.run_id == run.info.run_id  # the same run, continued from its checkpoint of epoch 2
    assert again.data.tags[f"{TAG}status"] == "ok"
    assert (state / "attempts").read_text().split() == ["0", "2", "0"]  # a fresh trial: the run's checkpoint tag
    _steps_once(uri, run.info.run_id)


def test_an_outage_in_a_search_stage_spends_no_budget_and_resume_finishes_the_search(tmp_path, uri):
    """Both grid points of the base search hit a storm: the sweep exits 3, its trial runs are interrupted (not
    spent), the cell is not done; `--resume` continues both runs and the search ends with them. No retries here
    (each retry is a new trial worker; the tests above retry)."""
    config = dict(CONFIG, training=dict(CONFIG["training"], lr=[0.01, 0.02]), base={"sampler": "grid"},
                  tune={"max_failures": 0})
    (tmp_path / "outage.yaml").write_text(yaml.safe_dump(config))
    state = write_fault_plugin(tmp_path, {"storm": 3}, forever=True)
    failed = _run(tmp_path)
    assert failed.returncode == 3, failed.stdout + failed.stderr
    assert "2 trial(s) stopped by an infrastructure failure" in failed.stdout.strip().splitlines()[-1]
    base = f"tags.`{TAG}phase` = 'base' and tags.`{TAG}kind` = 'trial'"
    cut = {r.info.run_id: r.data.tags[f"{TAG}status"] for r in search(uri, "outage", base)}
    assert sorted(cut.values()) == ["interrupted", "interrupted"]
    cell = search(uri, "outage", f"tags.`{TAG}phase` = 'base' and tags.`{TAG}kind` = 'cell'")[0]
    assert cell.data.tags[f"{TAG}status"] == "interrupted"
    assert "search incomplete: 0 of 2 trial(s) ended" in cell.data.tags[f"{TAG}error"]
    assert not search(uri, "outage", f"tags.`{TAG}status` = 'error'")

    (state / "off").touch()
    resumed = _run(tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    after = {r.info.run_id: r.data.tags[f"{TAG}status"] for r in search(uri, "outage", base)}
    assert after == dict.fromkeys(cut, "ok")  # the same two runs, continued; no third trial
    assert _evaluate_run(uri).data.tags[f"{TAG}status"] == "ok"
