"""End to end on a local Ray: tune with Optuna, evaluate over seeds, MLflow layout, report, resume."""
import json

import pytest
import yaml

from ndebench.platform.config import parse_spec
from ndebench.platform.sweep import Sweep
from ndebench.platform.tracking import TAG, evaluate_runs, search

SPEC = {
    "study": "e2e",
    "models": ["neural_cde"],
    "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.2, 0.4], "m": [5, 10]}},
    "model": {"hidden_size": 8},
    "training": {"epochs": 3, "min_epochs": 1, "patience": 1, "lr": 0.01},
    "tune": {"num_samples": 2, "seed": 0},
    "evaluate": {"seeds": [0, 1]},
}


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=150 * 1024**2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def finished(ray_local, tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    lines = []
    spec = parse_spec(SPEC)
    outcome = Sweep(spec, tracking_uri=uri, storage_path=root / "ray", printer=lines.append).run()
    return root, uri, spec, outcome, lines


def test_two_phases_record_one_mlflow_run_per_trial(finished):
    root, uri, spec, outcome, lines = finished
    runs = search(uri, "e2e")
    phases = [r.data.tags[f"{TAG}phase"] for r in runs]
    assert phases.count("tune") == 2 and phases.count("evaluate") == 4
    assert outcome.evaluated == 4 and outcome.errors == 0
    for run in runs:
        tags = run.data.tags
        for key in ("study", "phase", "model", "dataset", "regularizer", "seed", "status", "config_hash"):
            assert tags[f"{TAG}{key}"], key
        assert tags[f"{TAG}status"] == "ok" and run.info.status == "FINISHED"
        assert run.data.params["model"] == "neural_cde" and "training.lr" in run.data.params
        assert {"train_loss", "val_loss", "val_accuracy", "epoch_time_s"} <= set(run.data.metrics)
    evaluate = [r for r in runs if r.data.tags[f"{TAG}phase"] == "evaluate"]
    assert all({"test_accuracy", "test_nll", "test_ece"} <= set(r.data.metrics) for r in evaluate)
    assert not any("test_accuracy" in r.data.metrics for r in runs if r.data.tags[f"{TAG}phase"] == "tune")
    assert sorted(int(r.data.tags[f"{TAG}seed"]) for r in evaluate) == [0, 0, 1, 1]
    assert any("tuning regularizer.m, regularizer.p" in line for line in lines)


def test_evaluate_runs_use_the_tune_phase_best_config(finished):
    root, uri, spec, outcome, lines = finished
    best = json.loads((root / "ray" / "e2e" / "neural_cde__synthetic__continuum_dropout" / "best_config.json").read_text())
    tune_runs = [r for r in search(uri, "e2e") if r.data.tags[f"{TAG}phase"] == "tune"]
    best_run = min(tune_runs, key=lambda r: r.data.metrics["val_loss"])
    assert float(best_run.data.params["regularizer.p"]) == best["regularizer.p"]
    frame = evaluate_runs(uri, "e2e")
    cd = frame[frame.regularizer == "continuum_dropout"]
    for run_id in cd.run_id:
        params = next(r for r in search(uri, "e2e") if r.info.run_id == run_id).data.params
        assert float(params["regularizer.p"]) == best["regularizer.p"] and float(params["regularizer.m"]) == best["regularizer.m"]
    assert set(cd.test_protocol) == {"mc5"} and set(frame[frame.regularizer == "none"].test_protocol) == {"deterministic"}
    assert all(isinstance(c, dict) and sum(c["count"]) > 0 for c in frame.calibration)


def test_rerun_without_resume_is_refused_and_resume_duplicates_nothing(finished):
    root, uri, spec, outcome, lines = finished
    before = len(search(uri, "e2e"))
    with pytest.raises(RuntimeError, match="--resume"):
        Sweep(spec, tracking_uri=uri, storage_path=root / "ray", printer=lines.append).run()
    again = Sweep(spec, tracking_uri=uri, storage_path=root / "ray", resume=True, printer=lines.append).run()
    assert again.evaluated == 0 and again.skipped == 4
    assert len(search(uri, "e2e")) == before
    # A tune phase whose best config was never stored (interrupted driver) is restored from Ray's
    # experiment state instead of being searched again.
    best_file = root / "ray" / "e2e" / "neural_cde__synthetic__continuum_dropout" / "best_config.json"
    best = json.loads(best_file.read_text())
    best_file.unlink()
    restored = Sweep(spec, tracking_uri=uri, storage_path=root / "ray", resume=True, printer=lines.append).run()
    assert json.loads(best_file.read_text()) == best and restored.evaluated == 0
    assert len(search(uri, "e2e")) == before


def test_cli_report_writes_tables_and_logs_artifacts(finished, tmp_path, capsys):
    from ndebench.platform.cli import main

    root, uri, spec, outcome, lines = finished
    assert main(["report", "--study", "e2e", "--tracking-uri", uri, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "continuum_dropout" in out and "p" in out
    for name in ("results.csv", "table.md", "table.tex", "summary.json"):
        assert (tmp_path / "e2e" / name).is_file()
    report_runs = [r for r in search(uri, "e2e") if r.data.tags.get(f"{TAG}phase") == "report"]
    assert len(report_runs) == 1
    from mlflow.tracking import MlflowClient

    names = {a.path for a in MlflowClient(uri).list_artifacts(report_runs[0].info.run_id, "report")}
    assert "report/table.md" in names and "report/table.tex" in names


def test_all_regularizers_config_runs_end_to_end(ray_local, tmp_path):
    from pathlib import Path

    import pandas as pd

    from ndebench.platform.report import build_report
    from ndebench.regularizers.registry import list_regularizers

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "tune_configs" / "all_regularizers.yaml").read_text())
    assert set(raw["regularizers"]) == set(list_regularizers())
    raw.update(training={"epochs": 2, "min_epochs": 1, "patience": 1, "lr": 0.005},
               tune={"num_samples": 1}, evaluate={"seeds": [0, 1]}, model={"hidden_size": 4})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = Sweep(parse_spec(raw), tracking_uri=uri, storage_path=tmp_path / "ray", printer=lambda _: None).run()
    assert outcome.errors == 0 and outcome.evaluated == 2 * len(raw["regularizers"])
    runs = evaluate_runs(uri, "all_regularizers")
    assert set(runs.status) == {"ok"}
    files = build_report(runs, tmp_path / "reports", "all_regularizers")
    table = files.table_md.read_text().split("## NLL")[0]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "regularizer" not in line]
    assert sorted(rows) == sorted(raw["regularizers"])
    summary = json.loads(files.summary_json.read_text())
    assert "student" in json.dumps(summary).lower()
    protocols = dict(zip(runs.regularizer, runs.test_protocol))
    assert protocols["jump_diffusion_ttn"] == "mc5" and protocols["continuum_dropout"] == "mc5"
    assert protocols["jump_diffusion"] == protocols["steer"] == protocols["tabn"] == "deterministic"
    assert isinstance(pd.read_csv(files.results_csv), pd.DataFrame)
