"""Checks of a sweep config's sections against the registries: models, datasets, regularizers, solvers,
training and dataset options, and the shared helpers that turn raw YAML values into checked ones."""
from __future__ import annotations

import dataclasses
from typing import Any

from ndebench.datasets.registry import split_name
from ndebench.models.integrate import ODE_ADAPTIVE, ODE_FIXED, SolverConfig, solver_methods
from ndebench.models.registry import REGISTRY as MODELS
from ndebench.models.registry import list_models, model_info, model_options
from ndebench.platform.common import fields as typed
from ndebench.platform.spec.sweepspec import ConfigError, Space, TrainingConfig, Value
from ndebench.regularizers.registry import REGISTRY as REGULARIZERS
from ndebench.regularizers.registry import list_regularizers, regularizer_info

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
                check_hyperparam(name, key, v, f"regularizers.{name}.{key}")
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


def check_hyperparam(regularizer: str, key: str, value: Any, where: str) -> None:
    """``value`` of the hyperparameter ``key`` of ``regularizer``: accepted by its declared rule
    (:meth:`~ndebench.regularizers.catalog.HyperParam.rule`; a ``ConfigError`` naming ``where`` otherwise)."""
    _require(where, value, regularizer_info(regularizer).hyperparams[key].rule)


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
                "atol": typed.number(0, low_open=True), "max_steps": typed.integer(1, null=True),
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
