"""Sweep specs: YAML in ``tune_configs/`` validated once into typed objects.

Every value below a sweep's ``model``, ``training`` and regularizer sections is either fixed (a scalar),
a categorical search space (a list), or a mapping ``{loguniform: [lo, hi]}``, ``{uniform: [lo, hi]}``,
``{randint: [lo, hi]}`` (hi exclusive) or ``{choice: [...]}``. Unknown keys and bad values raise
:class:`ConfigError` naming the key path; nothing downstream re-checks the config.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ndebench.datasets.registry import split_name
from ndebench.models.integrate import ODE_ADAPTIVE, ODE_FIXED, SolverConfig, solver_methods
from ndebench.models.registry import REGISTRY as MODELS
from ndebench.models.registry import list_models, model_info, model_options
from ndebench.platform import fields as typed
from ndebench.platform.registry import UnknownNameError
from ndebench.regularizers.registry import REGISTRY as REGULARIZERS
from ndebench.regularizers.registry import list_regularizers, regularizer_info


class ConfigError(ValueError):
    """A sweep config problem; the message names the key path and what would be valid."""


@dataclass(frozen=True)
class Space:
    """A searched hyperparameter: ``kind`` in choice/loguniform/uniform/randint with its ``args``."""

    kind: str
    args: tuple[Any, ...]

    def values_to_check(self) -> tuple[Any, ...]:
        return self.args

    def to_tune(self) -> Any:
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.args))
        return getattr(tune, self.kind)(*self.args)


Value = Any  # a fixed scalar or a Space


PROTOCOLS = ("paper", "joint")
SAMPLERS = ("tpe", "random", "grid")
SCHEDULERS = ("fifo", "asha")
MAX_SEED = 2**32 - 1  # NumPy's and Optuna's seeds are 32-bit


@dataclass(frozen=True)
class TrainingConfig:
    """Optimisation settings (defaults: the torch-ists reference pipeline).

    ``optimizer``: ``adam`` (weight decay ``lr * weight_decay_factor``) or ``sgd`` (momentum 0.9, same
    decay). ``scheduler``: ``step`` (StepLR every ``lr_step`` epochs by ``lr_gamma``) or ``plateau``
    (ReduceLROnPlateau on validation loss by ``lr_gamma`` after ``lr_step`` epochs without improvement; the
    paper's image recipe is SGD, lr 0.1, halved after 2 flat epochs).
    """

    epochs: int = typed.checked(100, typed.integer(1))
    optimizer: str = typed.checked("adam", typed.one_of("adam", "sgd"))
    scheduler: str = typed.checked("step", typed.one_of("step", "plateau"))
    batch_size: int | str = typed.checked("auto", typed.either(typed.one_of("auto"), typed.integer(1)))
    lr: float = typed.checked(1e-3, typed.number(0, low_open=True))
    weight_decay_factor: float = typed.checked(0.01, typed.number(0))
    lr_step: int = typed.checked(10, typed.integer(1))
    lr_gamma: float = typed.checked(0.5, typed.number(0, low_open=True))
    patience: int = typed.checked(10, typed.integer(1))
    min_epochs: int = typed.checked(20, typed.integer(0))
    grad_clip: float | None = typed.checked(10.0, typed.number(0, low_open=True, null=True))
    threads: int | None = typed.checked(None, typed.integer(1, null=True))


@dataclass(frozen=True)
class AshaConfig:
    """ASHA early stopping of a search stage: rungs at ``grace_period * reduction_factor**k`` epochs up to
    ``max_epochs`` (default: the stage's training epochs)."""

    grace_period: int = typed.checked(1, typed.integer(1))
    reduction_factor: int = typed.checked(4, typed.integer(2))
    max_epochs: int | None = typed.checked(None, typed.integer(1, null=True))


@dataclass(frozen=True)
class TuneConfig:
    num_samples: int = typed.checked(20, typed.integer(1))
    metric: str = "val_loss"
    mode: str = typed.checked("min", typed.one_of("min", "max"))
    seed: int = typed.checked(0, typed.integer(0, MAX_SEED))
    max_concurrent: int | None = typed.checked(None, typed.integer(1, null=True))
    sampler: str = typed.checked("tpe", typed.one_of(*SAMPLERS))
    n_startup_trials: int = typed.checked(10, typed.integer(0))
    scheduler: str = typed.checked("fifo", typed.one_of(*SCHEDULERS))
    asha: AshaConfig = AshaConfig()
    max_failures: int = typed.checked(2, typed.integer(0))
    checkpoint_every: int = typed.checked(1, typed.integer(1))


@dataclass(frozen=True)
class EvaluateConfig:
    seeds: tuple[int, ...] = typed.checked((0, 1, 2, 3, 4), typed.sequence_of(typed.integer(0, MAX_SEED)))
    save_weights: bool = True


@dataclass(frozen=True)
class Resources:
    cpu: float = typed.checked(1.0, typed.number(0, low_open=True))
    gpu: float = typed.checked(0.0, typed.number(0))
    system_metrics: bool = True


@dataclass(frozen=True)
class ReportConfig:
    test: str = typed.checked("student", typed.one_of("student", "welch", "paired"))
    alpha: float = typed.checked(0.05, typed.number(0, 1, low_open=True, high_open=True))
    correction: str = typed.checked("none", typed.one_of("none", "holm", "bh"))


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: cells = models x datasets x regularizers, each tuned then evaluated over seeds."""

    study: str
    description: str
    models: tuple[str, ...]
    datasets: tuple[str, ...]
    regularizers: dict[str, dict[str, Value]]
    model: dict[str, Value]
    training: dict[str, Value]
    dataset_options: dict[str, Any]
    solver: dict[str, SolverConfig]
    tune: TuneConfig
    evaluate: EvaluateConfig
    resources: Resources
    report: ReportConfig
    data_dir: str | None = None
    source: str | None = None
    protocol: str = "paper"
    model_overrides: dict[str, dict[str, Value]] = dataclasses.field(default_factory=dict)
    base: TuneConfig = TuneConfig()
    base_epochs: int | None = None
    variants: dict[str, str] = dataclasses.field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()

    def model_params(self, model: str) -> dict[str, Value]:
        """The ``model:`` section for ``model``: shared keys with that model's own block merged over them."""
        return {**self.model, **self.model_overrides.get(model, {})}

    def cells(self) -> list[tuple[str, str, str]]:
        return [(m, d, r) for m in self.models for d in self.datasets for r in self.regularizers]

    def solver_for(self, model: str) -> SolverConfig | None:
        return self.solver.get(model, self.solver.get("default"))

    def base_config(self, model: str, dataset: str, regularizer: str) -> dict[str, Any]:
        """The flat trial config of a cell: ``section.key`` -> fixed value or :class:`Space`."""
        config: dict[str, Any] = {
            "study": self.study, "model": model, "dataset": dataset, "regularizer": regularizer,
            "data_dir": self.data_dir,
        }
        config.update({f"model.{k}": v for k, v in self.model_params(model).items()})
        config.update({f"training.{k}": v for k, v in self.training.items()})
        config.update({f"dataset.{k}": v for k, v in self.dataset_options.items()})
        config.update({f"regularizer.{k}": v for k, v in self.regularizers.get(regularizer, {}).items()})
        solver = self.solver_for(model)
        if solver is not None:
            config.update({f"solver.{k}": v for k, v in dataclasses.asdict(solver).items()})
        return config


TOP_KEYS = {
    "study", "description", "models", "datasets", "regularizers", "model", "training", "dataset_options",
    "solver", "tune", "evaluate", "resources", "report", "data_dir", "protocol", "base", "variants", "plugins",
}
VARIANT_MODES = ("grid",)
MODEL_COMMON = {"hidden_size", "num_layers"}


def _unknown(keys: set[str], valid: set[str], where: str) -> None:
    extra = sorted(keys - valid)
    if extra:
        raise ConfigError(f"unknown key(s) {extra} in {where}; valid keys: {sorted(valid)}")


def _require(where: str, value: Any, rule: typed.Rule) -> None:
    issue = typed.problem(where, value, rule)
    if issue:
        raise ConfigError(issue)


def _names(raw: Any, where: str) -> tuple[str, ...]:
    """A list of distinct names (a lone string is refused: ``models: neural_cde`` is not a list)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
        example = raw if isinstance(raw, str) else "name"
        raise ConfigError(f"{where}={raw!r} must be a list of names, e.g. {where}: [{example}]")
    duplicates = sorted({name for name in raw if raw.count(name) > 1})
    if duplicates:
        raise ConfigError(f"{where}: {', '.join(map(repr, duplicates))} listed more than once; list each once")
    return tuple(raw)


def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(raw).__name__}: {raw!r}")
    return raw


def parse_value(raw: Any, where: str) -> Value:
    """A scalar stays fixed; a list becomes ``choice``; ``{kind: args}`` becomes that :class:`Space`."""
    if isinstance(raw, list):
        if not raw:
            raise ConfigError(f"{where}: an empty list is no search space")
        return Space("choice", tuple(raw))
    if isinstance(raw, dict):
        if len(raw) != 1:
            raise ConfigError(f"{where}: a search space is one of {{loguniform|uniform|randint|choice: [...]}}, "
                              f"got {raw!r}")
        (kind, args), = raw.items()
        if kind not in ("loguniform", "uniform", "randint", "choice"):
            raise ConfigError(f"{where}: unknown search space {kind!r}; valid: choice, loguniform, randint, uniform")
        if not isinstance(args, list) or not args or (kind != "choice" and len(args) != 2):
            raise ConfigError(f"{where}.{kind} needs a list{' [low, high]' if kind != 'choice' else ''}, got {args!r}")
        if kind != "choice" and not all(typed.is_number(a) for a in args):
            raise ConfigError(f"{where}.{kind}={args!r}: bounds must be finite numbers")
        if kind == "randint" and not all(typed.is_int(a) for a in args):
            raise ConfigError(f"{where}.randint={args!r}: bounds must be integers")
        if kind != "choice" and not args[0] < args[1]:
            raise ConfigError(f"{where}.{kind}: low {args[0]!r} must be < high {args[1]!r}")
        if kind == "loguniform" and not args[0] > 0:
            raise ConfigError(f"{where}.loguniform: bounds must be > 0, got {args!r}")
        return Space(kind, tuple(args))
    return raw


def _candidates(value: Value) -> tuple[Any, ...]:
    return value.values_to_check() if isinstance(value, Space) else (value,)


def _dataclass_from(cls: type, raw: Any, where: str, rules: dict[str, typed.Rule] | None = None) -> Any:
    """``cls(**raw)`` after every given field passed its annotation's type rule and ``rules`` (ranges)."""
    raw = _mapping(raw, where)
    names = {f.name for f in dataclasses.fields(cls)}
    _unknown(set(raw), names, where)
    for key, rule in (typed.dataclass_rules(cls) | (rules or {})).items():
        if key in raw:
            _require(f"{where}.{key}", raw[key], rule)
    try:
        return cls(**raw)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_training(training: dict[str, Value]) -> None:
    valid = {f.name for f in dataclasses.fields(TrainingConfig)}
    _unknown(set(training), valid, "training")
    rules = typed.dataclass_rules(TrainingConfig)
    for key, value in training.items():
        for v in _candidates(value):
            _require(f"training.{key}", v, rules[key])


def _model_rules(model: str) -> dict[str, typed.Rule]:
    """Type rules of a model's hyperparameters, from its constructor's annotations."""
    return {name: typed.hint_rule(option.annotation) for name, option in model_options(model).items()}


def _check_models(models: tuple[str, ...], model_section: dict[str, Value]) -> None:
    for name in models:
        if name not in MODELS:
            raise ConfigError(f"models: unknown model {name!r}; valid models: {', '.join(list_models())}")
    for name in models:
        params = set(model_options(name))
        bad = sorted(set(model_section) - params)
        if bad:
            raise ConfigError(f"model: key(s) {bad} are not hyperparameters of model {name!r}; valid: {sorted(params)}")
    for name in models:
        rules = _model_rules(name)
        for key, value in model_section.items():
            for v in _candidates(value):
                _require(f"model.{key}", v, typed.integer(1) if key in MODEL_COMMON else rules[key])


def _check_datasets(datasets: tuple[str, ...], models: tuple[str, ...]) -> None:
    from ndebench.datasets.registry import dataset_info

    for name in datasets:
        try:
            split_name(name)
        except KeyError as exc:
            raise ConfigError(f"datasets: {exc.args[0]}") from None
        kind = dataset_info(name).input_kind
        for model in models:
            if model_info(model).input_kind != kind:
                raise ConfigError(
                    f"model {model!r} takes {model_info(model).input_kind} inputs but dataset {name!r} is "
                    f"{kind}; pair it with a {model_info(model).input_kind} dataset"
                )


def _type_of_choices(choices: tuple[Any, ...]) -> typed.Rule:
    """A hyperparameter takes values of its default choices' type: numbers (finite, never booleans), booleans
    or strings."""
    if all(isinstance(c, bool) for c in choices):
        return typed.boolean
    if all(typed.is_number(c) for c in choices):
        return typed.number()
    if all(isinstance(c, str) for c in choices):
        return typed.text
    return lambda value: None


def _check_regularizers(raw: Any, models: tuple[str, ...],
                        solvers: dict[str, SolverConfig]) -> dict[str, dict[str, Value]]:
    if isinstance(raw, list):
        raw = {name: {} for name in _names(raw, "regularizers")}
    raw = _mapping(raw, "regularizers")
    if not raw:
        raise ConfigError("regularizers: name at least one regularizer (and 'none' as the baseline)")
    out: dict[str, dict[str, Value]] = {}
    for name, params in raw.items():
        if name not in REGULARIZERS:
            raise ConfigError(f"regularizers: unknown regularizer {name!r}; valid regularizers: "
                              f"{', '.join(list_regularizers())}")
        info = regularizer_info(name)
        params = _mapping(params, f"regularizers.{name}")
        _unknown(set(params), set(info.hyperparams), f"regularizers.{name}")
        resolved: dict[str, Value] = {}
        for key, hp in info.hyperparams.items():
            value = parse_value(params[key], f"regularizers.{name}.{key}") if key in params else (
                hp.choices[0] if len(hp.choices) == 1 else Space("choice", hp.choices)
            )
            for v in _candidates(value):
                _require(f"regularizers.{name}.{key}", v, _type_of_choices(hp.choices))
                problem = hp.check(v)
                if problem:
                    raise ConfigError(f"regularizers.{name}.{key}={v!r} {problem}")
            resolved[key] = value
        for model in models:
            reason = info.incompatible(model_info(model))
            if reason:
                raise ConfigError(f"regularizer {name!r} cannot be used with model {model!r}: {reason}")
            method = _solver_of(model, solvers).method
            if info.requires_fixed_step and method in ODE_ADAPTIVE:
                raise ConfigError(
                    f"regularizer {name!r} needs a fixed-step solver but model {model!r} uses {method!r}; "
                    f"use one of {', '.join(ODE_FIXED)}"
                )
        out[name] = resolved
    return out


def _solver_of(model: str, solvers: dict[str, SolverConfig]) -> SolverConfig:
    """The solver ``model`` runs with: its own block, else the config's default, else the model's default."""
    return solvers.get(model, solvers.get("default")) or model_info(model).default_solver


def _check_solvers(raw: Any, models: tuple[str, ...]) -> dict[str, SolverConfig]:
    raw = _mapping(raw, "solver")
    fields = {f.name for f in dataclasses.fields(SolverConfig)}
    if raw and set(raw) <= fields:
        raw = {"default": raw}
    out: dict[str, SolverConfig] = {}
    for key, section in raw.items():
        where = "solver" if key == "default" else f"solver.{key}"
        if key != "default" and key not in MODELS:
            raise ConfigError(f"{where}: unknown key {key!r}; give solver settings directly or per model name "
                              f"({', '.join(list_models())})")
        try:
            out[key] = _dataclass_from(SolverConfig, section, where, {
                "step_size": typed.number(0, low_open=True, null=True), "rtol": typed.number(0, low_open=True),
                "atol": typed.number(0, low_open=True),
            })
        except ConfigError:
            raise
        except ValueError as exc:  # SolverConfig's own checks name the field: "method='rk5' is not a solver; ..."
            raise ConfigError(f"{where}.{exc}") from None
    for model in models:
        family = model_info(model).family
        kind = "sde" if family == "sde" else "ode"
        method = _solver_of(model, out).method
        if method not in solver_methods(kind):
            where = "solver" if model not in out else f"solver.{model}"
            raise ConfigError(f"{where}.method={method!r} does not solve the {family.upper()} model {model!r}; valid: "
                              f"{', '.join(solver_methods(kind))} (set it per model, e.g. solver: {{{model}: "
                              "{method: ...}})")
    return out


def _check_dataset_options(raw: Any, datasets: tuple[str, ...]) -> dict[str, Any]:
    from ndebench.datasets.registry import dataset_options

    options = _mapping(raw, "dataset_options")
    for name in datasets:
        valid = dataset_options(name)
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ConfigError(f"dataset_options: {unknown} not accepted by dataset {name!r}; valid: {valid or 'none'}")
    _require("dataset_options.missing_rate", options.get("missing_rate", 0.0), typed.number(0, 1, high_open=True))
    return options


STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_study_name(study: Any) -> str:
    """A study name is a folder name and an MLflow experiment: letters, digits, ``.``, ``_``, ``-`` (at most 100,
    starting with a letter or digit, no ``..``), so that it never escapes the report or results folder."""
    if not (isinstance(study, str) and STUDY_NAME.fullmatch(study) and ".." not in study):
        raise ConfigError(f"study={study!r} must be a name of letters, digits, '.', '_' and '-' (at most 100, "
                          "starting with a letter or digit, no '..'), e.g. study: my_sweep-1")
    return study


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated in one mapping (plain YAML keeps the last silently,
    which would drop e.g. a whole search grid)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):
                continue  # SafeLoader itself refuses it as "found unhashable key"
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key]}); each key may appear once "
                    "per mapping", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` settings over a loaded config: ``KEY`` a dotted path (``training.epochs``,
    ``regularizers.continuum_dropout.p``), ``VALUE`` parsed as YAML (``2``, ``[0.1, 0.3]``, ``null``)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted KEY, e.g. training.epochs=2")
        try:
            value = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({exc})") from None
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if isinstance(child, list) and all(isinstance(name, str) for name in child):
                child = {name: {} for name in child}  # a list of regularizer names, each with its defaults
            if child is None:
                child = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:depth + 1])} is {child!r}, not a mapping")
            node[part] = child
            node = child
        node[parts[-1]] = value
    return out


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> SweepSpec:
    """Read and validate a sweep YAML file into a :class:`SweepSpec`, with ``--set`` ``overrides`` applied
    (:func:`apply_overrides`) before validation."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {str(path)!r} is a directory; give a sweep YAML file such as "
                          "tune_configs/quickstart.yaml")
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not a UTF-8 text file (byte {exc.start}); "
                          "give a sweep YAML file") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    try:
        raw = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}" + (f" line {mark.line + 1}, column {mark.column + 1}" if mark else "")
        what = " ".join(filter(None, (getattr(exc, "context", None), getattr(exc, "problem", None)))) or str(exc)
        raise ConfigError(f"{where}: not valid YAML: {what}") from None
    if raw is None:
        raise ConfigError(f"config file {str(path)!r} is empty; see tune_configs/quickstart.yaml for a sweep config")
    spec = parse_spec(apply_overrides(raw, overrides) if overrides else raw)
    return dataclasses.replace(spec, source=str(path.resolve()), overrides=tuple(overrides))


def _plugins(raw: Any) -> tuple[str, ...]:
    """``plugins:``, modules imported before anything is looked up by name, so their components register."""
    from ndebench.platform.plugins import PluginError, import_plugins

    _require("plugins", raw, typed.either(typed.one_of(None), typed.sequence_of(typed.text)))
    modules = tuple(raw or ())
    try:
        import_plugins(modules)
    except PluginError as exc:
        raise ConfigError(str(exc)) from None
    return modules


def parse_spec(raw: Any) -> SweepSpec:
    """Validate a config mapping (as loaded from YAML) into a :class:`SweepSpec`."""
    raw = _mapping(raw, "config")
    _unknown(set(raw), TOP_KEYS, "the config's top level")
    study = check_study_name(raw.get("study"))
    plugins = _plugins(raw.get("plugins"))
    models = _names(raw.get("models"), "models")
    datasets = _names(raw.get("datasets"), "datasets")
    if not models:
        raise ConfigError(f"models: name at least one model; valid models: {', '.join(list_models())}")
    if not datasets:
        raise ConfigError("datasets: name at least one dataset (see `ndebench list datasets`)")
    try:
        model_section, model_overrides = _split_model_section(raw.get("model"), models)
        for name in models:
            _check_models((name,), {**model_section, **model_overrides.get(name, {})})
        _check_datasets(datasets, models)
    except UnknownNameError as exc:
        raise ConfigError(str(exc)) from None
    training = {k: parse_value(v, f"training.{k}") for k, v in _mapping(raw.get("training"), "training").items()}
    _check_training(training)
    solvers = _check_solvers(raw.get("solver"), models)
    regularizers = _check_regularizers(raw.get("regularizers"), models, solvers)
    tune_cfg = _check_search(_dataclass_from(TuneConfig, raw.get("tune"), "tune"), "tune")
    if not tune_cfg.metric.startswith("val_"):
        raise ConfigError(f"tune.metric={tune_cfg.metric!r} must be a validation metric "
                          "(val_loss, val_accuracy, val_auroc, ...)")
    evaluate = _dataclass_from(EvaluateConfig, raw.get("evaluate"), "evaluate")
    seeds = tuple(evaluate.seeds)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"evaluate.seeds={list(seeds)!r} must be distinct integers >= 0")
    evaluate = dataclasses.replace(evaluate, seeds=seeds)
    resources = _dataclass_from(Resources, raw.get("resources"), "resources")
    report = _dataclass_from(ReportConfig, raw.get("report"), "report")
    _require("description", raw.get("description", ""), typed.text)
    _check_description(str(raw.get("description", "")))
    _require("data_dir", raw.get("data_dir"), typed.hint_rule(str | None))
    spec = SweepSpec(
        study=study, description=str(raw.get("description", "")), models=models, datasets=datasets,
        regularizers=regularizers, model=model_section, training=training,
        dataset_options=_check_dataset_options(raw.get("dataset_options"), datasets), solver=solvers, tune=tune_cfg,
        evaluate=evaluate, resources=resources, report=report, data_dir=raw.get("data_dir"), plugins=plugins,
    )
    return _with_protocol(spec, raw)


def searched_keys(config: dict[str, Any]) -> list[str]:
    return sorted(k for k, v in config.items() if isinstance(v, Space))


def _check_description(text: str) -> None:
    """The description becomes the study run's MLflow note, a tag value with a length limit."""
    from mlflow.utils.validation import MAX_EXPERIMENT_TAG_VAL_LENGTH

    if len(text) > MAX_EXPERIMENT_TAG_VAL_LENGTH:
        raise ConfigError(f"description has {len(text):,} characters; MLflow stores at most "
                          f"{MAX_EXPERIMENT_TAG_VAL_LENGTH:,} (the study's note)")


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of a resolved (fully fixed) trial config."""
    payload = json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _split_model_section(raw: Any, models: tuple[str, ...]) -> tuple[dict[str, Value], dict[str, dict[str, Value]]]:
    """Shared ``model:`` keys, and per-model blocks (a key naming a registered model maps to its overrides)."""
    shared, overrides = {}, {}
    for key, value in _mapping(raw, "model").items():
        if key in MODELS:
            if key not in models:
                raise ConfigError(f"model.{key}: a block for model {key!r}, which is not in models {list(models)}")
            block = _mapping(value, f"model.{key}")
            overrides[key] = {k: parse_value(v, f"model.{key}.{k}") for k, v in block.items()}
        else:
            shared[key] = parse_value(value, f"model.{key}")
    return shared, overrides


def _check_search(tune: TuneConfig, where: str) -> TuneConfig:
    """The budget, sampler, start-up, scheduler and ASHA settings of a search stage (``tune`` or ``base``)."""
    for key, rule in typed.dataclass_rules(TuneConfig).items():
        if key != "asha":
            _require(f"{where}.{key}", getattr(tune, key), rule)
    asha = tune.asha if isinstance(tune.asha, AshaConfig) else _dataclass_from(AshaConfig, tune.asha, f"{where}.asha")
    return dataclasses.replace(tune, asha=asha)


def _with_protocol(spec: SweepSpec, raw: dict[str, Any]) -> SweepSpec:
    """``protocol``, the base-stage search settings (``base:``) and the fixed-parameter ``variants``."""
    protocol = raw.get("protocol", "paper")
    if protocol not in PROTOCOLS:
        raise ConfigError(f"protocol={protocol!r}; valid: {', '.join(PROTOCOLS)}")
    base_raw = dict(_mapping(raw.get("base"), "base"))
    if base_raw and protocol != "paper":
        raise ConfigError("base: the base-stage search settings apply to protocol: paper only")
    epochs = base_raw.pop("epochs", None)
    _require("base.epochs", epochs, typed.integer(1, null=True))
    _unknown(set(base_raw), {"num_samples", "sampler", "n_startup_trials", "scheduler", "asha", "max_concurrent"},
             "base")
    base = _check_search(dataclasses.replace(spec.tune, **base_raw), "base")
    variants = dict(_mapping(raw.get("variants"), "variants"))
    for name, mode in variants.items():
        if name not in spec.regularizers:
            raise ConfigError(f"variants.{name}: not one of the sweep's regularizers {list(spec.regularizers)}")
        if mode not in VARIANT_MODES:
            raise ConfigError(f"variants.{name}={mode!r}; valid: {', '.join(VARIANT_MODES)}")
        spaces = {k: v for k, v in spec.regularizers[name].items() if isinstance(v, Space)}
        if not spaces or any(v.kind != "choice" for v in spaces.values()):
            raise ConfigError(f"variants.{name}: expanding needs a categorical grid (lists) of its hyperparameters; "
                              f"got {spaces or 'nothing searched'}")
    shared_spaces = [f"{section}.{k}" for section, values in (("model", spec.model), ("training", spec.training))
                     for k, v in values.items() if isinstance(v, Space)]
    if variants and protocol == "joint" and shared_spaces:
        raise ConfigError(f"variants need fixed model/training values under protocol: joint "
                          f"(searched: {shared_spaces}); "
                          "use protocol: paper, where variants take the base stage's values")
    overrides = _split_model_section(raw.get("model"), spec.models)[1]
    out = dataclasses.replace(spec, protocol=protocol, base=base, base_epochs=epochs, variants=variants,
                              model_overrides=overrides)
    _check_grids(out)
    return out


def _check_grids(spec: SweepSpec) -> None:
    """``sampler: grid`` covers a categorical space exactly; a continuous distribution has no grid."""
    from ndebench.platform.spec.plan import plan_stages

    for stage in plan_stages(spec):
        if stage.tune.sampler != "grid":
            continue
        for cell in stage.cells:
            continuous = [k for k, v in cell.space.items() if v.kind != "choice"]
            if continuous:
                where = ("base.sampler" if stage.name == "base" and spec.base.sampler != spec.tune.sampler
                         else "tune.sampler")
                raise ConfigError(f"{where}=grid but {cell.label} searches continuous {continuous}; "
                                  "give them as lists of values or use sampler tpe/random")
