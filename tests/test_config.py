"""Sweep YAML validation: typed objects, and errors that name the key and the valid choices."""
import copy

import pytest
import yaml
from ndebench.platform.spec.config import ConfigError, Space, config_hash, load_spec, parse_spec, searched_keys

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
    (with_(["regularizers", "continuum_dropout", "p"], 1.5),
     r"regularizers.continuum_dropout.p=1.5 must lie in \[1e-06, 1 - 1e-06\] \(a dropout rate in \(0, 1\)\)"),
    (with_(["regularizers", "continuum_dropout", "p"], [0.2, 1.5]), r"p=1.5"),
    (with_(["regularizers", "continuum_dropout", "m"], 0), r"m=0 must lie in \[1e-06, 1e\+06\]"),
    (with_(["regularizers", "continuum_dropout", "q"], 1),
     r"unknown key\(s\) \['q'\] in regularizers.continuum_dropout"),
    (with_(["regularizers", "dropuot"], {}), r"unknown regularizer 'dropuot'; valid regularizers: .*continuum_dropout"),
    (with_(["models"], ["neural_cdee"]), r"unknown model 'neural_cdee'; valid models: .*neural_cde"),
    # Any archive set is read by name (its files are checked later): only a name no set can have is refused here.
    (with_(["datasets"], ["uea/Basic Motionz"]), r"unknown uea dataset 'Basic Motionz'.*BasicMotions"),
    (with_(["datasets"], ["cifar11"]), r"unknown dataset 'cifar11' \(did you mean 'cifar10' or 'cifar100'\?\); "
                                       r"valid datasets"),
    (with_(["model", "hidden"], 8), r"key\(s\) \['hidden'\] are not hyperparameters of model 'neural_cde'"),
    (with_(["model", "hidden_size"], 0), r"model.hidden_size=0 must be an integer >= 1"),
    (with_(["training", "lr"], {"loguniform": [0, 1]}), r"bounds must be > 0"),
    (with_(["training", "lr"], {"lognormal": [1, 2]}), r"unknown search space 'lognormal'"),
    (with_(["solver"], {"method": "rk5"}), r"solver.method='rk5' is not a solver; valid: euler"),
    (with_(["solver"], {"neural_cde": {"method": "srk", "adjoint": True}}),
     r"solver.neural_cde.adjoint=True: method 'srk' has no adjoint"),
    (with_(["solver"], {"method": "milstein"}),
     r"solver.method='milstein' does not solve the CDE model 'neural_cde'; valid: euler, midpoint"),
    ({**with_(["models"], ["neural_sde"]), "solver": {"neural_sde": {"method": "dopri5"}}},
     r"solver.neural_sde.method='dopri5' does not solve the SDE model 'neural_sde'; valid: euler, milstein, srk"),
    (with_(["model", "width"], 8), r"key\(s\) \['width'\] are not hyperparameters of model 'neural_cde'; "
                                   r"valid: \['hidden_size', 'interpolation', 'num_layers'\]"),
    (with_(["model", "interpolation"], "cubic"), r"model.interpolation='cubic' must be one of 'hermite'"),
    (with_(["tune", "metric"], "test_accuracy"), r"must be a validation metric"),
    (with_(["evaluate", "seeds"], [0, 0]), r"distinct"),
    (with_(["dataset_options"], {"missing_rate": 1.0}), r"missing_rate=1.0 must be a finite number in \[0, 1\)"),
    (with_(["study"], "a b"), r"study='a b'"),
    (with_(["report", "test"], "wilcoxon"), r"report.test='wilcoxon' must be one of 'student', 'welch', 'paired'"),
    (with_(["report", "correction"], "bonferroni"),
     r"report.correction='bonferroni' must be one of 'none', 'holm', 'bh'"),
    (with_(["report", "figures"], "some"),
     r"report.figures='some' must be one of 'auto', 'all', 'summary', 'none'"),
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


def test_config_hash_is_the_experiment_not_the_machine():
    a = {"model": "neural_cde", "seed": 0, "training.lr": 0.01, "data_dir": "/mnt/a", "device": "cpu",
         "training.threads": 1}
    moved = {**a, "data_dir": "/scratch/copy", "device": "cuda", "training.threads": 8}
    assert config_hash(a) == config_hash(moved)
    assert config_hash(a) != config_hash({**a, "training.lr": 0.02})


def test_every_shipped_tune_config_validates():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[1] / "tune_configs").glob("*.yaml"))
    assert configs
    for path in configs:
        load_spec(path)


# Hardening probes (issue 14): each bad value is refused naming the key, the value and what is expected.

@pytest.mark.parametrize("study", ["..", ".", "../up", "a/b", "a\nb", "tab\there", "", "-x", "a..b", "x" * 101,
                                   5, None])
def test_study_names_are_safe_folder_names(study):
    with pytest.raises(ConfigError, match=r"study=.* must be a name of letters, digits"):
        parse_spec(with_(["study"], study))


@pytest.mark.parametrize("study", ["a", "paper_table1", "Run-2.v3", "0"])
def test_safe_study_names_pass(study):
    assert parse_spec(with_(["study"], study)).study == study


@pytest.mark.parametrize("path,value,message", [
    (["models"], ["neural_cde", "neural_cde"], r"models: 'neural_cde' listed more than once"),
    (["datasets"], ["synthetic", "synthetic"], r"datasets: 'synthetic' listed more than once"),
    (["regularizers"], ["none", "continuum_dropout", "none"], r"regularizers: 'none' listed more than once"),
    (["models"], "neural_cde", r"models='neural_cde' must be a list of names, e.g. models: \[neural_cde\]"),
    (["datasets"], {"synthetic": 1}, r"datasets=\{'synthetic': 1\} must be a list of names"),
])
def test_lists_of_names_refuse_duplicates_and_strings(path, value, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(with_(path, value))


def test_duplicate_yaml_keys_are_errors_naming_the_key_and_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("study: t\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\n"
                    "training:\n  lr: [0.1, 0.01]\n  epochs: 2\n  lr: 0.5\n")
    with pytest.raises(ConfigError,
                       match=r"dup.yaml line 8, column 3: not valid YAML: duplicate key 'lr' \(first on line 6\)"):
        load_spec(path)


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("study: t\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\n"
                    "training:\n  <<: {epochs: 2, lr: 0.1}\n  lr: 0.5\n")
    training = load_spec(path).training
    assert training["epochs"] == 2 and training["lr"] == 0.5


@pytest.mark.parametrize("path,value,message", [
    (["training", "epochs"], True, r"training.epochs=True must be an integer >= 1"),
    (["training", "epochs"], [2, False], r"training.epochs=False must be an integer >= 1"),
    (["training", "lr"], float("inf"), r"training.lr=inf must be a finite number > 0"),
    (["training", "lr"], {"loguniform": [1e-4, float("inf")]},
     r"training.lr.loguniform=\[0.0001, inf\]: bounds must be finite numbers"),
    (["training", "lr"], {"uniform": ["a", 1]}, r"training.lr.uniform=\['a', 1\]: bounds must be finite numbers"),
    (["training", "batch_size"], "big", r"training.batch_size='big' must be one of 'auto' or an integer >= 1"),
    (["training", "grad_clip"], float("nan"), r"training.grad_clip=nan must be null or a finite number > 0"),
    (["tune", "num_samples"], True, r"tune.num_samples=True must be an integer >= 1"),
    (["tune", "seed"], "abc", r"tune.seed='abc' must be an integer"),
    (["tune", "max_concurrent"], -1, r"tune.max_concurrent=-1 must be null or an integer >= 1"),
    (["tune", "metric"], 5, r"tune.metric=5 must be a string"),
    (["evaluate", "seeds"], [0, True],
     r"evaluate.seeds=\[0, True\] must be a list; its item True must be an integer in \[0, 4294967295\]"),
    (["evaluate", "seeds"], 3, r"evaluate.seeds=3 must be a list"),
    (["data_dir"], 5, r"data_dir=5 must be null or a string"),
    (["description"], ["x"], r"description=\['x'\] must be a string"),
    (["resources", "cpu"], "two", r"resources.cpu='two' must be a finite number > 0"),
    (["resources", "gpu"], float("nan"), r"resources.gpu=nan must be a finite number in \[0, 1\] or an integer >= 1"),
    (["resources", "gpu"], 1.5, r"resources.gpu=1.5 must be a finite number in \[0, 1\] or an integer >= 1"),
    (["resources", "gpu"], -0.25, r"resources.gpu=-0.25 must be a finite number in \[0, 1\] or an integer >= 1"),
    (["report", "alpha"], "0.05", r"report.alpha='0.05' must be a finite number in \(0, 1\)"),
    (["solver", "step_size"], "0.1", r"solver.step_size='0.1' must be null or a finite number > 0"),
    (["solver", "adjoint"], "yes", r"solver.adjoint='yes' must be true or false"),
    (["model", "hidden_size"], True, r"model.hidden_size=True must be an integer >= 1"),
    (["model", "interpolation"], "cubic", r"model.interpolation='cubic' must be one of 'hermite', 'natural', 'linear'"),
    (["regularizers", "continuum_dropout", "m"], True,
     r"regularizers.continuum_dropout.m=True must be a finite number"),
    (["regularizers", "continuum_dropout", "n_mc"], False,
     r"regularizers.continuum_dropout.n_mc=False must be a finite number"),
    (["regularizers", "continuum_dropout", "m"], float("inf"),
     r"regularizers.continuum_dropout.m=inf must be a finite number"),
    (["dataset_options", "missing_rate"], True, r"missing_rate=True must be a finite number in \[0, 1\)"),
])
def test_every_field_is_type_checked(path, value, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(with_(path, value))


def test_the_note_limit_is_mlflows():
    from mlflow.utils.validation import MAX_EXPERIMENT_TAG_VAL_LENGTH
    from ndebench.platform.spec.config import MAX_NOTE_LENGTH

    assert MAX_NOTE_LENGTH == MAX_EXPERIMENT_TAG_VAL_LENGTH


LIGHT_NODE = """
import sys
from ndebench.platform.cli.main import main
from ndebench.platform.spec.config import load_spec
load_spec("tiny.yaml")
assert main(["validate", "tiny.yaml"]) == 0
assert main(["bench", "throughput", "tiny.yaml", "--trials", "1"]) == 0
assert main(["bench", "models", "--models", "neural_ode", "--hidden", "4", "--batch", "2", "--length", "4",
             "--reps", "1"]) == 0
print(sorted({name.split(".")[0] for name in sys.modules} & {"mlflow", "ray"}))
"""


def test_loading_validating_and_benching_import_neither_mlflow_nor_ray(tmp_path):
    """A GPU node's image may hold neither (issue 38): a fresh interpreter loads and validates a config, trains one
    trial of it with `bench throughput` and times a step with `bench models`."""
    import subprocess
    import sys

    raw = {"study": "tiny", "models": ["neural_ode"], "datasets": ["synthetic"],
           "dataset_options": {"num_samples": 32, "length": 8}, "regularizers": {"none": {}},
           "model": {"hidden_size": 4}, "training": {"epochs": 1, "min_epochs": 1}, "evaluate": {"seeds": [0]}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, "-c", LIGHT_NODE], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "[]"
