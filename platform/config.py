"""Sweep specs: YAML in ``tune_configs/`` validated once into typed objects.

Every value below a sweep's ``model``, ``training`` and regularizer sections is either fixed (a scalar),
a categorical search space (a list), or a mapping ``{loguniform: [lo, hi]}``, ``{uniform: [lo, hi]}``,
``{randint: [lo, hi]}`` (hi exclusive) or ``{choice: [...]}``. Unknown keys and bad values raise
:class:`ConfigError` naming the key path; nothing downstream re-checks the config.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ndebench.datasets.registry import split_name
from ndebench.models.integrate import ODE_ADAPTIVE, ODE_FIXED, SDE_METHODS, SolverConfig
from ndebench.models.registry import list_models, model_info
from ndebench.platform.registry import UnknownNameError
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


@dataclass(frozen=True)
class TrainingConfig:
    """Optimisation settings (defaults: the torch-ists reference pipeline).

    ``optimizer``: ``adam`` (weight decay ``lr * weight_decay_factor``) or ``sgd`` (momentum 0.9, same
    decay). ``scheduler``: ``step`` (StepLR every ``lr_step`` epochs by ``lr_gamma``) or ``plateau``
    (ReduceLROnPlateau on validation loss by ``lr_gamma`` after ``lr_step`` epochs without improvement; the
    paper's image recipe is SGD, lr 0.1, halved after 2 flat epochs).
    """

    epochs: int = 100
    optimizer: str = "adam"
    scheduler: str = "step"
    batch_size: int | str = "auto"
    lr: float = 1e-3
    weight_decay_factor: float = 0.01
    lr_step: int = 10
    lr_gamma: float = 0.5
    patience: int = 10
    min_epochs: int = 20
    grad_clip: float | None = 10.0
    threads: int | None = None


@dataclass(frozen=True)
class TuneConfig:
    num_samples: int = 20
    metric: str = "val_loss"
    mode: str = "min"
    seed: int = 0
    max_concurrent: int | None = None


@dataclass(frozen=True)
class EvaluateConfig:
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Resources:
    cpu: float = 1.0
    gpu: float = 0.0


@dataclass(frozen=True)
class ReportConfig:
    test: str = "student"
    alpha: float = 0.05
    correction: str = "none"


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
        config.update({f"model.{k}": v for k, v in self.model.items()})
        config.update({f"training.{k}": v for k, v in self.training.items()})
        config.update({f"dataset.{k}": v for k, v in self.dataset_options.items()})
        config.update({f"regularizer.{k}": v for k, v in self.regularizers[regularizer].items()})
        solver = self.solver_for(model)
        if solver is not None:
            config.update({f"solver.{k}": v for k, v in dataclasses.asdict(solver).items()})
        return config


TOP_KEYS = {
    "study", "description", "models", "datasets", "regularizers", "model", "training", "dataset_options",
    "solver", "tune", "evaluate", "resources", "report", "data_dir",
}
MODEL_COMMON = {"hidden_size", "num_layers"}


def _unknown(keys: set[str], valid: set[str], where: str) -> None:
    extra = sorted(keys - valid)
    if extra:
        raise ConfigError(f"unknown key(s) {extra} in {where}; valid keys: {sorted(valid)}")


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
            raise ConfigError(f"{where}: a search space is one of {{loguniform|uniform|randint|choice: [...]}}, got {raw!r}")
        (kind, args), = raw.items()
        if kind not in ("loguniform", "uniform", "randint", "choice"):
            raise ConfigError(f"{where}: unknown search space {kind!r}; valid: choice, loguniform, randint, uniform")
        if not isinstance(args, list) or (kind != "choice" and len(args) != 2):
            raise ConfigError(f"{where}.{kind} needs a list{' [low, high]' if kind != 'choice' else ''}, got {args!r}")
        if kind != "choice" and not args[0] < args[1]:
            raise ConfigError(f"{where}.{kind}: low {args[0]!r} must be < high {args[1]!r}")
        if kind == "loguniform" and not args[0] > 0:
            raise ConfigError(f"{where}.loguniform: bounds must be > 0, got {args!r}")
        return Space(kind, tuple(args))
    return raw


def _candidates(value: Value) -> tuple[Any, ...]:
    return value.values_to_check() if isinstance(value, Space) else (value,)


def _dataclass_from(cls: type, raw: Any, where: str) -> Any:
    raw = _mapping(raw, where)
    names = {f.name for f in dataclasses.fields(cls)}
    _unknown(set(raw), names, where)
    try:
        return cls(**raw)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_training(training: dict[str, Value]) -> None:
    valid = {f.name for f in dataclasses.fields(TrainingConfig)}
    _unknown(set(training), valid, "training")
    for key, value in training.items():
        for v in _candidates(value):
            where = f"training.{key}={v!r}"
            if key in ("epochs", "lr_step", "patience") and not (isinstance(v, int) and v >= 1):
                raise ConfigError(f"{where} must be an integer >= 1")
            if key == "min_epochs" and not (isinstance(v, int) and v >= 0):
                raise ConfigError(f"{where} must be an integer >= 0")
            if key == "batch_size" and not (v == "auto" or (isinstance(v, int) and v >= 1)):
                raise ConfigError(f"{where} must be 'auto' or an integer >= 1")
            if key in ("lr", "lr_gamma") and not (isinstance(v, (int, float)) and v > 0):
                raise ConfigError(f"{where} must be a number > 0")
            if key == "weight_decay_factor" and not (isinstance(v, (int, float)) and v >= 0):
                raise ConfigError(f"{where} must be a number >= 0")
            if key == "grad_clip" and not (v is None or (isinstance(v, (int, float)) and v > 0)):
                raise ConfigError(f"{where} must be null or a number > 0")
            if key == "optimizer" and v not in ("adam", "sgd"):
                raise ConfigError(f"{where}; valid: adam, sgd")
            if key == "scheduler" and v not in ("step", "plateau"):
                raise ConfigError(f"{where}; valid: step, plateau")
            if key == "threads" and not (v is None or (isinstance(v, int) and v >= 1)):
                raise ConfigError(f"{where} must be null or an integer >= 1")


def _model_params(model: str) -> set[str]:
    from ndebench.models.registry import _REGISTRY, _load_builtins

    _load_builtins()
    signature = inspect.signature(_REGISTRY.get(model).__init__)
    reserved = {"self", "in_channels", "num_classes", "times", "regularizer", "solver", "binary", "image_size",
                "static_channels"}
    return {name for name in signature.parameters if name not in reserved}


def _check_models(models: tuple[str, ...], model_section: dict[str, Value]) -> None:
    valid = list_models()
    for name in models:
        if name not in valid:
            raise ConfigError(f"models: unknown model {name!r}; valid models: {', '.join(valid)}")
    for name in models:
        params = _model_params(name)
        bad = sorted(set(model_section) - params)
        if bad:
            raise ConfigError(f"model: key(s) {bad} are not hyperparameters of model {name!r}; valid: {sorted(params)}")
    for key, value in model_section.items():
        for v in _candidates(value):
            if key in MODEL_COMMON and not (isinstance(v, int) and v >= 1):
                raise ConfigError(f"model.{key}={v!r} must be an integer >= 1")


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


def _check_regularizers(raw: Any, models: tuple[str, ...], solvers: dict[str, SolverConfig]) -> dict[str, dict[str, Value]]:
    if isinstance(raw, list):
        raw = {name: {} for name in raw}
    raw = _mapping(raw, "regularizers")
    if not raw:
        raise ConfigError("regularizers: name at least one regularizer (and 'none' as the baseline)")
    valid = list_regularizers()
    out: dict[str, dict[str, Value]] = {}
    for name, params in raw.items():
        if name not in valid:
            raise ConfigError(f"regularizers: unknown regularizer {name!r}; valid regularizers: {', '.join(valid)}")
        info = regularizer_info(name)
        params = _mapping(params, f"regularizers.{name}")
        _unknown(set(params), set(info.hyperparams), f"regularizers.{name}")
        resolved: dict[str, Value] = {}
        for key, hp in info.hyperparams.items():
            value = parse_value(params[key], f"regularizers.{name}.{key}") if key in params else (
                hp.choices[0] if len(hp.choices) == 1 else Space("choice", hp.choices)
            )
            for v in _candidates(value):
                problem = hp.check(v)
                if problem:
                    raise ConfigError(f"regularizers.{name}.{key}={v!r} {problem}")
            resolved[key] = value
        for model in models:
            if model in info.incompatible_models:
                raise ConfigError(f"regularizer {name!r} cannot be used with model {model!r}: {info.incompatible_models[model]}")
            solver = solvers.get(model, solvers.get("default"))
            method = solver.method if solver else "euler"
            if info.requires_fixed_step and method in ODE_ADAPTIVE:
                raise ConfigError(
                    f"regularizer {name!r} needs a fixed-step solver but model {model!r} uses {method!r}; "
                    f"use one of {', '.join(ODE_FIXED)}"
                )
        out[name] = resolved
    return out


def _check_solvers(raw: Any) -> dict[str, SolverConfig]:
    raw = _mapping(raw, "solver")
    fields = {f.name for f in dataclasses.fields(SolverConfig)}
    if raw and set(raw) <= fields:
        raw = {"default": raw}
    out: dict[str, SolverConfig] = {}
    for key, section in raw.items():
        where = "solver" if key == "default" else f"solver.{key}"
        if key != "default" and key not in list_models():
            raise ConfigError(f"{where}: unknown key {key!r}; give solver settings directly or per model name ({', '.join(list_models())})")
        solver = _dataclass_from(SolverConfig, section, where)
        valid = ODE_FIXED + ODE_ADAPTIVE + tuple(m for m in SDE_METHODS if m not in ODE_FIXED)
        if solver.method not in valid:
            raise ConfigError(f"{where}.method={solver.method!r} is not a solver; valid: {', '.join(valid)}")
        if solver.step_size is not None and not solver.step_size > 0:
            raise ConfigError(f"{where}.step_size={solver.step_size!r} must be > 0")
        out[key] = solver
    return out


def _check_dataset_options(raw: Any, datasets: tuple[str, ...]) -> dict[str, Any]:
    from ndebench.datasets.registry import dataset_options

    options = _mapping(raw, "dataset_options")
    for name in datasets:
        valid = dataset_options(name)
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ConfigError(f"dataset_options: {unknown} not accepted by dataset {name!r}; valid: {valid or 'none'}")
    rate = options.get("missing_rate", 0.0)
    if not (isinstance(rate, (int, float)) and 0.0 <= rate < 1.0):
        raise ConfigError(f"dataset_options.missing_rate={rate!r} must be a number in [0, 1)")
    return options


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML file into a :class:`SweepSpec`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    spec = parse_spec(raw)
    return dataclasses.replace(spec, source=str(path.resolve()))


def parse_spec(raw: Any) -> SweepSpec:
    """Validate a config mapping (as loaded from YAML) into a :class:`SweepSpec`."""
    raw = _mapping(raw, "config")
    _unknown(set(raw), TOP_KEYS, "the config's top level")
    study = raw.get("study")
    if not isinstance(study, str) or not study or any(c in study for c in "/\\ "):
        raise ConfigError(f"study={study!r} must be a non-empty name without spaces or slashes")
    models = tuple(raw.get("models") or ())
    datasets = tuple(raw.get("datasets") or ())
    if not models:
        raise ConfigError(f"models: name at least one model; valid models: {', '.join(list_models())}")
    if not datasets:
        raise ConfigError("datasets: name at least one dataset (see `ndebench list datasets`)")
    try:
        _check_models(models, {k: parse_value(v, f"model.{k}") for k, v in _mapping(raw.get("model"), "model").items()})
        _check_datasets(datasets, models)
    except UnknownNameError as exc:
        raise ConfigError(str(exc)) from None
    model_section = {k: parse_value(v, f"model.{k}") for k, v in _mapping(raw.get("model"), "model").items()}
    training = {k: parse_value(v, f"training.{k}") for k, v in _mapping(raw.get("training"), "training").items()}
    _check_training(training)
    solvers = _check_solvers(raw.get("solver"))
    regularizers = _check_regularizers(raw.get("regularizers"), models, solvers)
    tune_cfg = _dataclass_from(TuneConfig, raw.get("tune"), "tune")
    if not (isinstance(tune_cfg.num_samples, int) and tune_cfg.num_samples >= 1):
        raise ConfigError(f"tune.num_samples={tune_cfg.num_samples!r} must be an integer >= 1")
    if tune_cfg.mode not in ("min", "max"):
        raise ConfigError(f"tune.mode={tune_cfg.mode!r} must be 'min' or 'max'")
    if not tune_cfg.metric.startswith("val_"):
        raise ConfigError(f"tune.metric={tune_cfg.metric!r} must be a validation metric (val_loss, val_accuracy, val_auroc, ...)")
    evaluate = _dataclass_from(EvaluateConfig, raw.get("evaluate"), "evaluate")
    seeds = tuple(evaluate.seeds)
    if not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"evaluate.seeds={list(seeds)!r} must be distinct integers >= 0")
    evaluate = EvaluateConfig(seeds=seeds)
    resources = _dataclass_from(Resources, raw.get("resources"), "resources")
    if not resources.cpu > 0 or resources.gpu < 0:
        raise ConfigError(f"resources: cpu={resources.cpu!r} must be > 0 and gpu={resources.gpu!r} >= 0")
    report = _dataclass_from(ReportConfig, raw.get("report"), "report")
    if report.test not in ("student", "welch", "paired"):
        raise ConfigError(f"report.test={report.test!r}; valid: student, welch, paired")
    if not 0 < report.alpha < 1:
        raise ConfigError(f"report.alpha={report.alpha!r} must lie in (0, 1)")
    if report.correction not in ("none", "holm", "bh"):
        raise ConfigError(f"report.correction={report.correction!r}; valid: none, holm, bh")
    return SweepSpec(
        study=study, description=str(raw.get("description", "")), models=models, datasets=datasets,
        regularizers=regularizers, model=model_section, training=training,
        dataset_options=_check_dataset_options(raw.get("dataset_options"), datasets), solver=solvers, tune=tune_cfg,
        evaluate=evaluate, resources=resources, report=report, data_dir=raw.get("data_dir"),
    )


def searched_keys(config: dict[str, Any]) -> list[str]:
    return sorted(k for k, v in config.items() if isinstance(v, Space))


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of a resolved (fully fixed) trial config."""
    payload = json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]

