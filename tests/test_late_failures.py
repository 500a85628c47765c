"""Values that once failed only after Ray had started (reliability review N023-N027): each is refused with exit 2
and a message that names the key or flag, before Ray starts and before any run is recorded."""
from __future__ import annotations

from pathlib import Path

import pytest
import ray
import yaml
from ndebench.platform.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
TINY = {"study": "late", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}}


def _config(tmp_path: Path, **edit) -> str:
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump({**TINY, **edit}))
    return str(path)


def _refused(capsys, argv: list[str], *needles: str) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert all(needle in err for needle in needles), err
    assert "Ray cluster" not in out + err and "Traceback" not in err and not ray.is_initialized()
    return err


@pytest.mark.parametrize("edit,needle", [
    ({"evaluate": {"seeds": [0, 2**32]}}, "evaluate.seeds"),
    ({"tune": {"seed": 2**32}}, "tune.seed=4294967296"),
    ({"description": "x" * 20_001}, "description has 20,001 characters; MLflow stores at most 20,000"),
])
def test_a_value_beyond_a_library_limit_fails_validate_and_run(tmp_path, monkeypatch, capsys, edit, needle):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, **edit)
    for command in ("validate", "run"):
        _refused(capsys, [command, config], needle)
    assert not (tmp_path / "mlflow.db").exists()


def test_the_largest_seed_is_accepted(tmp_path, capsys):
    assert main(["validate", _config(tmp_path, evaluate={"seeds": [2**32 - 1]})]) == 0


def test_more_cpus_than_the_machine_has_warns_in_validate_and_fails_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path, resources={"cpu": 1000})
    assert main(["validate", config]) == 0
    assert "warning: resources.cpu=1000 is more than this machine's" in capsys.readouterr().out
    _refused(capsys, ["run", config], "resources.cpu=1000 is more than any node of the cluster has")


def test_out_naming_a_file_fails_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder")
    _refused(capsys, ["run", _config(tmp_path), "--out", "afile"], "--out 'afile' is a file; it must be a folder")
    _refused(capsys, ["run", _config(tmp_path), "--out", "afile/sub"], "--out 'afile/sub' lies under the file")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("command", ["run", "report"])
def test_a_tracking_uri_without_its_driver_fails(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    argv = ["run", _config(tmp_path)] if command == "run" else ["report", "--study", "late"]
    _refused(capsys, [*argv, "--tracking-uri", "mysql://u:p@127.0.0.1/db"], "--tracking-uri 'mysql://u:p@127.0.0.1/db'",
             "the mysql driver is not installed")
    _refused(capsys, [*argv, "--tracking-uri", "ftp://host/db"], "scheme 'ftp' is not one MLflow stores runs in")


def test_a_huge_plan_gets_a_warning(tmp_path, capsys):
    # The search budget and the seeds both count: 99,990 base trials + 11 seeds (a YAML list of 100,001 seeds
    # would spend a minute in the YAML parser).
    search = {"lr": {"loguniform": [1.0e-3, 1.0e-1]}}
    config = _config(tmp_path, training=TINY["training"] | search, evaluate={"seeds": list(range(11))},
                     tune={"sampler": "random", "num_samples": 99_990})
    assert main(["validate", config]) == 0
    assert "warning: the plan has 100,001 trials (more than 100,000)" in capsys.readouterr().out
