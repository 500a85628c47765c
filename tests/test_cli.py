"""The ndebench command line: rates, validate (fails before Ray starts), list, help, ui."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ndebench.platform.cli import main
from ndebench.regularizers.rates import dropout_rate, expected_renewals

ROOT = Path(__file__).resolve().parents[1]


def test_rates_json_satisfies_both_equations(capsys):
    assert main(["rates", "--p", "0.3", "--m", "10", "--T", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert dropout_rate(out["lambda1"], out["lambda2"], 1.0) == pytest.approx(0.3, rel=1e-9)
    assert expected_renewals(out["lambda1"], out["lambda2"], 1.0) == pytest.approx(10, rel=1e-9)


def test_rates_rejects_bad_p(capsys):
    assert main(["rates", "--p", "1.5", "--m", "10"]) == 2
    assert "p=1.5" in capsys.readouterr().err


@pytest.mark.parametrize("edit,needle", [
    ({"trainng": {"epochs": 2}}, "unknown key(s) ['trainng']"),
    ({"regularizers": {"none": {}, "continuum_dropout": {"p": 1.5}}}, "p=1.5"),
    ({"models": ["neural_cdx"]}, "unknown model 'neural_cdx'"),
])
def test_validate_fails_before_ray_with_a_named_problem(tmp_path, edit, needle):
    raw = yaml.safe_load((ROOT / "tune_configs" / "quickstart.yaml").read_text())
    raw.update(edit)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    for command in ("validate", "run"):
        proc = subprocess.run([sys.executable, "-m", "ndebench.platform.cli", command, str(path)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr
        assert "Ray cluster" not in proc.stdout + proc.stderr
        assert not (tmp_path / "mlflow.db").exists()


def test_validate_summarises_the_quickstart(capsys):
    assert main(["validate", str(ROOT / "tune_configs" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "neural_cde x uea/BasicMotions x continuum_dropout" in out


@pytest.mark.parametrize("what,name", [("models", "neural_cde"), ("regularizers", "continuum_dropout"), ("datasets", "uea/BasicMotions")])
def test_list(capsys, what, name):
    assert main(["list", what]) == 0
    assert name in capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "validate", "report", "ui", "rates", "list"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0 and "usage: ndebench" in capsys.readouterr().out


def test_ui_serves_runs_with_their_tags(tmp_path):
    from ndebench.platform.tracking import TrialRecorder

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tags = {"study": "uistudy", "phase": "evaluate", "model": "neural_cde", "dataset": "synthetic",
            "regularizer": "none", "seed": "0"}
    TrialRecorder(uri, "uistudy", {"model": "neural_cde"}, "abc", tags).finish("ok", {"test_accuracy": 0.5}, {}, {})
    port = 5000 + os.getpid() % 1000
    proc = subprocess.Popen([sys.executable, "-m", "ndebench.platform.cli", "ui", "--tracking-uri", uri, "--port", str(port)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "MLflow UI did not start"
                time.sleep(1)
        request = urllib.request.Request(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=uistudy")
        experiment = json.load(urllib.request.urlopen(request, timeout=10))["experiment"]
        body = json.dumps({"experiment_ids": [experiment["experiment_id"]]}).encode()
        search = urllib.request.Request(f"{base}/api/2.0/mlflow/runs/search", data=body, headers={"Content-Type": "application/json"})
        runs = json.load(urllib.request.urlopen(search, timeout=10))["runs"]
        run_tags = {t["key"]: t["value"] for t in runs[0]["data"]["tags"]}
        assert run_tags["ndebench.regularizer"] == "none" and run_tags["ndebench.status"] == "ok"
        assert urllib.request.urlopen(base, timeout=10).status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
