"""`ndebench validate` answers a broken config at once: every error with its line and a suggestion, before torch,
Ray or MLflow is imported; the static name tables it reads agree with the registries."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ndebench.platform.spec.lint import lint_file, lint_text

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "mlflow", "scipy")

THREE_ERRORS = """\
study: typo_demo
models: [neural_cdee]
datasets: [uea/BasicMotions]
regularizers:
  none: {}
  continuum_dropout:
    p: [0.1, 0.3]
    mm: [5, 50]
trainng:
  epochs: 2
"""

# The three kinds at once: an unknown name, an unknown key and a value out of range.
UNKNOWN_MODEL_KEY_AND_VALUE = THREE_ERRORS.replace("p: [0.1, 0.3]", "p: 1.5").replace("trainng", "training")

def test_names_agree_with_the_registries():
    """Run in a fresh interpreter: other tests register components of their own in this one."""
    script = """
import dataclasses, json
from ndebench.datasets.registry import REGISTRY as DATASETS, dataset_options, list_datasets
from ndebench.models.integrate import SolverConfig
from ndebench.models.registry import REGISTRY as MODELS, list_models, model_options
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.registry import REGISTRY, list_regularizers, regularizer_info
first = {family: next(n for n in list_datasets() if n.partition('/')[0] == family) for family in DATASETS.names()}
print(json.dumps({
    "declared": {r: regularizer_info(r).hyperparams == BUILTINS[r].hyperparams for r in list_regularizers()},
    "modules": {r: REGISTRY.get(r).__module__ == f"ndebench.regularizers.{BUILTINS[r].module}"
                for r in list_regularizers()},
    "models": {m: sorted(model_options(m)) for m in list_models()},
    "model_modules": {m: MODELS.get(m).__module__ for m in list_models()},
    "datasets": {f: dataset_options(first[f]) for f in DATASETS.names()},
    "dataset_modules": {f: getattr(DATASETS.get(f), "func", DATASETS.get(f)).__module__ for f in DATASETS.names()},
    "families": sorted(f for f in DATASETS.names() if DATASETS.info(f).family),
    "solver": [f.name for f in dataclasses.fields(SolverConfig)],
}))
"""
    from ndebench.datasets.catalog import BUILTINS as DATASETS
    from ndebench.models.catalog import BUILTINS as MODELS
    from ndebench.models.catalog import SOLVER_KEYS
    from ndebench.regularizers.catalog import BUILTINS

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    truth = json.loads(proc.stdout)
    assert truth["declared"] == truth["modules"] == dict.fromkeys(BUILTINS, True)
    assert truth["models"] == {k: sorted(v.hyperparams) for k, v in MODELS.items()}
    assert truth["model_modules"] == {k: f"ndebench.models.{v.module}" for k, v in MODELS.items()}
    assert truth["datasets"] == {k: sorted(v.options) for k, v in DATASETS.items()}
    assert truth["dataset_modules"] == {k: f"ndebench.datasets.{v.module}" for k, v in DATASETS.items()}
    assert truth["families"] == sorted(k for k, v in DATASETS.items() if v.family)
    assert truth["solver"] == list(SOLVER_KEYS)


@pytest.mark.parametrize("folder,call", [("models", "@register_model("), ("datasets", "register_dataset("),
                                         ("regularizers", "@register_regularizer(")])
def test_every_module_that_registers_a_built_in_is_in_its_catalogue(folder, call):
    """The registry imports only the modules its folder's ``catalog.py`` names, so a module left out would never
    register."""
    catalogue = importlib.import_module(f"ndebench.{folder}.catalog").BUILTINS
    registering = {path.stem for path in (ROOT / folder).glob("*.py")
                   if path.stem != "registry" and call in path.read_text()}
    assert registering == {declared.module for declared in catalogue.values()}


def test_a_declared_rule_is_the_one_the_config_applies_at_the_rate_solvers_bounds():
    from ndebench.platform.spec.sections import check_hyperparam
    from ndebench.platform.spec.sweepspec import ConfigError
    from ndebench.regularizers.checks import M_RANGE, P_RANGE

    def lint_refuses(key, value):
        config = {"study": "a", "models": ["neural_cde"], "datasets": ["synthetic"],
                  "regularizers": {"continuum_dropout": {key: value}}}
        return bool(lint_text(yaml.safe_dump(config)))

    def config_refuses(key, value):
        try:
            check_hyperparam("continuum_dropout", key, value, "x")
        except ConfigError:
            return True
        return False

    cases = [("p", v, False) for v in P_RANGE] + [("p", P_RANGE[0] / 2, True), ("p", (1 + P_RANGE[1]) / 2, True)]
    cases += [("m", v, False) for v in M_RANGE] + [("m", M_RANGE[1] * 2, True), ("m", True, True), ("m", "5", True)]
    assert [(lint_refuses(k, v), config_refuses(k, v)) for k, v, _ in cases] == [(r, r) for _, _, r in cases]


@pytest.mark.parametrize("path", sorted((ROOT / "tune_configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_have_no_problems(path):
    assert lint_file(path) == []


def test_every_error_is_listed_with_its_line_and_a_suggestion():
    problems = lint_text(THREE_ERRORS)
    assert [(p.line, p.where) for p in problems] == [(2, "models"), (8, "regularizers.continuum_dropout.mm"),
                                                     (9, "trainng")]
    assert "(did you mean 'neural_cde'?)" in problems[0].message
    assert "(did you mean 'm'?)" in problems[1].message
    assert "(did you mean 'training'?)" in problems[2].message


@pytest.mark.parametrize("text,line,needle", [
    ("study: a\nmodels: [neural_cde]\ndatasets: [uea]\nregularizers: [none]\n", 3, "needs a member"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic/x]\nregularizers: [none]\n", 3, "takes no '/<member>'"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [nonee]\n", 4, "did you mean 'none'"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\ntune:\n  seed: -1\n", 6,
     "tune.seed=-1 must be an integer"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\ntune: {asha: {grace_perod: 1}}\n", 5,
     "did you mean 'grace_period'"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\ntraining: {lr: [0.1, -1]}\n", 5,
     "training.lr=-1 must be a finite number > 0"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\nmodel: {width: 3}\n", 5,
     "not a hyperparameter of model(s) neural_cde"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\nsolver: {metod: rk4}\n", 5,
     "did you mean 'method'"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\nprotocol: jont\n", 5,
     "did you mean 'joint'"),
    ("study: a\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\ntune: {metric: loss}\n", 5,
     "must be a validation metric"),
    ("study: a\nstudy: b\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\n", 2,
     "duplicate key 'study' (first on line 1)"),
])
def test_single_problems(text, line, needle):
    problems = lint_text(text)
    assert len(problems) == 1 and problems[0].line == line and needle in problems[0].message, problems


def test_plugins_leave_names_to_the_registries():
    text = "study: a\nplugins: [my.plugin]\nmodels: [my_model]\ndatasets: [synthetic]\nregularizers: [none]\n"
    assert lint_text(text) == []


def test_an_override_replaces_what_it_sets(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(THREE_ERRORS)
    assert [p.where for p in lint_file(path, ["models=[neural_cde]"])] == ["regularizers.continuum_dropout.mm",
                                                                            "trainng"]


def test_a_value_out_of_range_is_named_beside_the_bad_names():
    problems = lint_text(UNKNOWN_MODEL_KEY_AND_VALUE)
    assert [(p.line, p.where) for p in problems] == [(2, "models"), (7, "regularizers.continuum_dropout.p"),
                                                     (8, "regularizers.continuum_dropout.mm")]


@pytest.mark.parametrize("value,bad", [("[0.1, 1.5]", 1.5), ("{uniform: [0.0, 0.5]}", 0.0), ("[0.1, 0.3]", None),
                                       ("{choice: [0.2, 1]}", 1), ("{loguniform: [0.01, 0.5]}", None)])
def test_every_candidate_of_a_searched_hyperparameter_is_checked(value, bad):
    text = f"study: a\nmodels: [neural_ode]\ndatasets: [synthetic]\nregularizers:\n  steer: {{b: {value}}}\n"
    problems = lint_text(text)
    assert [p.message for p in problems] == ([] if bad is None else [
        f"regularizers.steer.b={bad!r} must lie in the open interval (0, 1)"])


def test_validate_lists_three_errors_fast_without_heavy_imports(tmp_path):
    """The issue's measurement: `ndebench validate` in a fresh interpreter, its imports traced by -X importtime;
    the wall time is printed (pytest -s), the assertions are on what it imported and printed."""
    path = tmp_path / "bad.yaml"
    path.write_text(UNKNOWN_MODEL_KEY_AND_VALUE)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ndebench.platform", "validate", "bad.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    print(f"\nndebench validate, three errors: {wall:.2f} s wall")
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    heavy = sorted({name for name in imported if name.split(".")[0] in HEAVY})
    assert heavy == []
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2
    assert errors == [
        "bad.yaml:2: models: unknown model 'neural_cdee' (did you mean 'neural_cde'?); valid: ancde, gru_ode, "
        "image_node, image_nsde_additive, image_nsde_multiplicative, neural_cde, neural_gsde, neural_lnsde, "
        "neural_lsde, neural_ode, neural_sde, ode_rnn",
        "bad.yaml:7: regularizers.continuum_dropout.p=1.5 must lie in [1e-06, 1 - 1e-06] (a dropout rate in (0, 1))",
        "bad.yaml:8: unknown key 'mm' in regularizers.continuum_dropout (did you mean 'm'?); valid keys: m, mask, "
        "n_mc, p, scope",
        "ndebench validate: 3 error(s) in bad.yaml; nothing was run",
    ]
