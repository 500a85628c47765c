"""A result rewritten after its run ended shows: every report flags it from the values it already reads (the
digest the run recorded as it ended), and `ndebench verify` also reads each result metric's history. On sqlite,
with a synthetic study in the real run layout (the review's demonstration: Continuum Dropout's test_accuracy set
to 0.96 by one `log_metric` per run after the sweep)."""
from __future__ import annotations

import json
import math
import time

import pytest
from ndebench.platform import api
from ndebench.platform.cli.main import main
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.summaries import RESULTS_DIGEST, results_digest
from ndebench.platform.record.synthetic import write_study
from ndebench.platform.record.tracking import client, search
from ndebench.platform.report.integrity import changed_runs, verify_runs

STUDY = "t"


@pytest.fixture
def study(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_study(uri, STUDY, 10)  # model-a on dataset-000: none and continuum_dropout, 5 seeds each
    return uri


def _trials(uri: str, regularizer: str) -> list:
    return search(uri, STUDY, f"tags.`{TAG}kind` = 'trial' and tags.`{TAG}regularizer` = '{regularizer}'")


def _verify(uri: str, capsys) -> tuple[int, str]:
    code = main(["verify", "--study", STUDY, "--tracking-uri", uri])
    return code, capsys.readouterr().out


def test_the_digest_matches_what_the_store_returns_nan_and_infinity_included(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tags = {"study": STUDY, "phase": "evaluate", "model": "m", "dataset": "d", "regularizer": "none", "seed": "0",
            "cell": "c", "trial_dir": "t/evaluate-1/a"}
    recorder = TrialRecorder(uri, STUDY, {"x": 1}, "h", tags)
    recorder.finish("ok", {"test_accuracy": 0.1 + 0.2, "test_nll": math.inf, "test_ece": math.nan,
                           "val_loss": 1.0}, {}, {})
    run, = search(uri, STUDY)
    assert run.data.tags[f"{TAG}{RESULTS_DIGEST}"] == results_digest(run.data.metrics)
    assert run.data.tags[f"{TAG}{RESULTS_DIGEST}"].startswith("3 ")
    assert changed_runs([run]) == [] and verify_runs(client(uri), [run]) == []


def test_a_rewritten_test_metric_is_flagged_by_the_report_and_by_verify(study, tmp_path, capsys):
    assert _verify(study, capsys)[0] == 0
    clean = api.report_study(STUDY, study, tmp_path / "clean", figures="none")
    assert "WARNING" not in clean.markdown
    assert json.loads((tmp_path / "clean" / STUDY / "summary.json").read_text())["changed_results"] == []

    rewritten = [r.info.run_id for r in _trials(study, "continuum_dropout")[:2]]
    for run_id in rewritten:
        client(study).log_metric(run_id, "test_accuracy", 0.96, step=0)
    report = api.report_study(STUDY, study, tmp_path / "after", figures="none")
    assert report.markdown.startswith("WARNING: 2 run(s) have results that changed after the run ended")
    assert all(run_id in report.markdown.split("## Results changed after their runs ended")[1] for run_id in rewritten)
    summary = json.loads((tmp_path / "after" / STUDY / "summary.json").read_text())
    assert sorted(f["run_id"] for f in summary["changed_results"]) == sorted(rewritten)
    assert "WARNING: 2 run(s)" in (tmp_path / "after" / STUDY / "report.html").read_text()

    code, out = _verify(study, capsys)
    assert code == 1 and out.strip().endswith(f"study '{STUDY}': 2 run(s) with results changed after they ended")
    for run_id in rewritten:
        assert f"run {run_id} (evaluate " in out
    assert out.count("differ from those it recorded") == 2 and out.count("more than one value") == 2


def test_verify_finds_what_the_digest_cannot(study, capsys):
    """A rewrite that also set a matching digest, and a value logged again after the end: the report's check
    passes both; the metric's history shows them."""
    forged, relogged = (r.info.run_id for r in _trials(study, "none")[:2])
    mlflow_client = client(study)
    mlflow_client.log_metric(forged, "test_accuracy", 0.99, step=0)
    metrics = mlflow_client.get_run(forged).data.metrics
    mlflow_client.set_tag(forged, f"{TAG}{RESULTS_DIGEST}", results_digest(metrics))
    value = mlflow_client.get_run(relogged).data.metrics["test_accuracy"]
    mlflow_client.log_metric(relogged, "test_accuracy", value, timestamp=int(time.time() * 1000) + 60_000, step=0)
    assert changed_runs(search(study, STUDY)) == []
    code, out = _verify(study, capsys)
    assert code == 1
    assert f"run {forged} " in out and "test_accuracy: more than one value in the metric's history" in out
    assert f"run {relogged} " in out and "test_accuracy: a value logged after the run ended" in out
