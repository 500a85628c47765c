"""`ndebench validate`: every shipped config passes; a value a model refuses is an error before Ray starts, on its
file's line as the linter's errors are."""
from pathlib import Path

import pytest
import yaml
from ndebench.platform.cli.main import main

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "tune_configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_shipped_config_validates(config, capsys):
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert "valid (" in out and "stage evaluate:" in out
    if config.stem.startswith("paper_"):
        raw = yaml.safe_load(config.read_text())
        assert raw["protocol"] == "paper" and raw["tune"]["sampler"] == "grid"
        # Paper configs ask for a GPU node's CPUs, and most of their sets do not ship: on a smaller machine without
        # the archive only those warnings may appear.
        expected = ("resources.cpu", "has no files in")
        assert [line for line in out.splitlines()
                if "warning" in line and not any(e in line for e in expected)] == [], out


def test_a_value_a_model_refuses_fails_validate(tmp_path, capsys):
    raw = {"study": "s", "models": ["neural_cde", "gru_ode"], "datasets": ["synthetic"], "regularizers": ["none"],
           "model": {"hidden_size": 8, "num_layers": [1, 3]}}
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    line = config.read_text().splitlines().index("model:") + 1
    assert err.startswith(f"{config}:{line}: model 'gru_ode' refuses") and "num_layers=3" in err, err
    assert "Traceback" not in err
    raw["model"]["gru_ode"] = {"num_layers": 1}
    config.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(config)]) == 0


def test_validate_warns_when_tpe_never_leaves_its_start_up(tmp_path, capsys):
    raw = {"study": "s", "models": ["neural_cde"], "datasets": ["synthetic"], "protocol": "joint",
           "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3]}}, "tune": {"num_samples": 6}}
    config = tmp_path / "tpe.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr().out
    assert "tune.num_samples=6 <= n_startup_trials=10" in out and "stage tune (TPE" in out
    raw["tune"]["n_startup_trials"] = 3
    config.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(config)]) == 0 and "warning" not in capsys.readouterr().out


@pytest.mark.parametrize("text,line,start", [
    ("study: s\nmodels: [neural_sde]\ndatasets: [synthetic]\nregularizers: [none]\nsolver:\n  method: dopri5\n", 6,
     "solver.method='dopri5' does not solve the SDE model 'neural_sde'"),
    ("study: s\nmodels: [neural_cde]\ndatasets: [cifar10]\nregularizers: [none]\n", 2,
     "model 'neural_cde' takes"),
])
def test_an_error_only_the_full_validation_finds_has_its_line(tmp_path, capsys, text, line, start):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    assert main(["validate", str(config)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"{config}:{line}: {start}"), first
