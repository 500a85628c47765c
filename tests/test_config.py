"""Sweep YAML validation: typed objects, and errors that name the key and the valid choices."""
import copy

import pytest
import yaml

from ndebench.platform.config import ConfigError, Space, config_hash, load_spec, parse_spec, searched_keys

BASE = {
    "study": "t",
    "models": ["neural_cde"],
    "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": 10}},
    "training": {"epochs": 3, "lr": {"loguniform": [1e-4, 1e-2]}},
    "tune": {"num_samples": 2},
    "evaluate": {"seeds": [0, 1]},
}


def with_(path, value):
    raw = copy.deepcopy(BASE)
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return raw


def test_valid_config_becomes_typed_spec():
    spec = parse_spec(BASE)
    assert spec.cells() == [("neural_cde", "synthetic", "none"), ("neural_cde", "synthetic", "continuum_dropout")]
    cd = spec.regularizers["continuum_dropout"]
    assert cd["p"] == Space("choice", (0.1, 0.3)) and cd["m"] == 10
    assert cd["mask"] == "left" and cd["n_mc"] == 5
    base = spec.base_config("neural_cde", "synthetic", "continuum_dropout")
    assert searched_keys(base) == ["regularizer.p", "training.lr"]
    assert spec.evaluate.seeds == (0, 1)


def test_regularizer_defaults_are_the_papers_search_space():
    spec = parse_spec(with_(["regularizers"], ["none", "continuum_dropout"]))
    cd = spec.regularizers["continuum_dropout"]
    assert cd["p"] == Space("choice", (0.1, 0.2, 0.3, 0.4, 0.5))
    assert cd["m"] == Space("choice", (5, 10, 50, 100))


@pytest.mark.parametrize("raw,message", [
    (with_(["trainng"], {}), r"unknown key\(s\) \['trainng'\].*valid keys"),
    (with_(["training", "epoch"], 3), r"unknown key\(s\) \['epoch'\] in training"),
    (with_(["regularizers", "continuum_dropout", "p"], 1.5), r"regularizers.continuum_dropout.p=1.5 must lie in the open interval \(0, 1\)"),
    (with_(["regularizers", "continuum_dropout", "p"], [0.2, 1.5]), r"p=1.5"),
    (with_(["regularizers", "continuum_dropout", "m"], 0), r"m=0 must be"),
    (with_(["regularizers", "continuum_dropout", "q"], 1), r"unknown key\(s\) \['q'\] in regularizers.continuum_dropout"),
    (with_(["regularizers", "dropuot"], {}), r"unknown regularizer 'dropuot'; valid regularizers: .*continuum_dropout"),
    (with_(["models"], ["neural_cdee"]), r"unknown model 'neural_cdee'; valid models: .*neural_cde"),
    (with_(["datasets"], ["uea/BasicMotionz"]), r"unknown uea dataset 'BasicMotionz'.*BasicMotions"),
    (with_(["datasets"], ["cifar11"]), r"unknown dataset 'cifar11'; valid datasets"),
    (with_(["model", "hidden"], 8), r"key\(s\) \['hidden'\] are not hyperparameters of model 'neural_cde'"),
    (with_(["model", "hidden_size"], 0), r"model.hidden_size=0 must be an integer >= 1"),
    (with_(["training", "lr"], {"loguniform": [0, 1]}), r"bounds must be > 0"),
    (with_(["training", "lr"], {"lognormal": [1, 2]}), r"unknown search space 'lognormal'"),
    (with_(["solver"], {"method": "rk5"}), r"solver.method='rk5' is not a solver; valid: euler"),
    (with_(["tune", "metric"], "test_accuracy"), r"must be a validation metric"),
    (with_(["evaluate", "seeds"], [0, 0]), r"distinct"),
    (with_(["dataset_options"], {"missing_rate": 1.0}), r"missing_rate=1.0 must be a number in \[0, 1\)"),
    (with_(["study"], "a b"), r"study='a b'"),
    (with_(["report", "test"], "wilcoxon"), r"valid: student, welch, paired"),
    (with_(["report", "correction"], "bonferroni"), r"report.correction='bonferroni'; valid: none, holm, bh"),
])
def test_bad_configs_name_the_problem(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(raw)


def test_load_spec_reads_yaml_and_reports_missing_files(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert load_spec(path).source == str(path.resolve())
    with pytest.raises(ConfigError, match="does not exist"):
        load_spec(tmp_path / "missing.yaml")
    path.write_text("study: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(path)


def test_config_hash_is_stable_and_sensitive():
    a = {"model": "neural_cde", "seed": 0, "training.lr": 0.01}
    assert config_hash(a) == config_hash(dict(reversed(list(a.items()))))
    assert config_hash(a) != config_hash({**a, "seed": 1})


def test_every_shipped_tune_config_validates():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[1] / "tune_configs").glob("*.yaml"))
    assert configs
    for path in configs:
        load_spec(path)
