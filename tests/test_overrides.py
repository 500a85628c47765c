"""`--set KEY=VALUE` on run and validate: applied before validation, checked like the YAML."""
import pytest
from ndebench.platform.cli.main import main
from ndebench.platform.spec.config import ConfigError, apply_overrides, load_spec, parse_spec

QUICKSTART = "tune_configs/quickstart.yaml"
BASE = {"study": "s", "models": ["neural_cde"], "datasets": ["synthetic"],
        "regularizers": ["none", "continuum_dropout"]}


def test_overrides_reach_nested_keys_and_parse_values_as_yaml():
    raw = apply_overrides(BASE, ["training.epochs=2", "regularizers.continuum_dropout.p=[0.1, 0.3]",
                                 "model.neural_cde.num_layers=1", "evaluate.seeds=[0]"])
    assert raw["training"] == {"epochs": 2} and raw["evaluate"] == {"seeds": [0]}
    assert raw["regularizers"] == {"none": {}, "continuum_dropout": {"p": [0.1, 0.3]}}
    assert raw["model"] == {"neural_cde": {"num_layers": 1}}
    assert BASE["regularizers"] == ["none", "continuum_dropout"]
    spec = parse_spec(raw)
    assert spec.training["epochs"] == 2 and spec.evaluate.seeds == (0,)


def test_an_override_is_validated_like_the_yaml(tmp_path):
    with pytest.raises(ConfigError, match=r"training.epochs=True must be an integer >= 1"):
        load_spec(QUICKSTART, ["training.epochs=yes"])
    with pytest.raises(ConfigError, match=r"--set 'study.name=x': study is 'quickstart', not a mapping"):
        load_spec(QUICKSTART, ["study.name=x"])
    assert load_spec(QUICKSTART, ["tune.num_samples=3"]).overrides == ("tune.num_samples=3",)


@pytest.mark.parametrize("item", ["oops", "=3", "training..epochs=2", "training.epochs=[1"])
def test_malformed_overrides_exit_2_naming_them(item, capsys):
    assert main(["validate", QUICKSTART, "--set", item]) == 2
    assert f"--set {item!r}" in capsys.readouterr().err
