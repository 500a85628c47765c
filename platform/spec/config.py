"""Sweep specs: YAML in ``tune_configs/`` validated once into typed objects.

Every value below a sweep's ``model``, ``training`` and regularizer sections is either fixed (a scalar),
a categorical search space (a list), or a mapping ``{loguniform: [lo, hi]}``, ``{uniform: [lo, hi]}``,
``{randint: [lo, hi]}`` (hi exclusive) or ``{choice: [...]}``. Unknown keys and bad values raise
:class:`ConfigError` naming the key path; nothing downstream re-checks the config. The typed objects live in
:mod:`.sweepspec`, the per-section checks in :mod:`.sections`, the protocol's checks in :mod:`.plan`.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import yaml
from ndebench.models.registry import REGISTRY as MODELS
from ndebench.models.registry import list_models
from ndebench.platform.common import fields as typed
from ndebench.platform.common.registry import UnknownNameError
from ndebench.platform.spec.lint import TOP_KEYS, check_study_name
from ndebench.platform.spec.plan import check_grids, variant_models
from ndebench.platform.spec.sections import (
    _check_dataset_options,
    _check_datasets,
    _check_models,
    _check_regularizers,
    _check_solvers,
    _check_training,
    _dataclass_from,
    _mapping,
    _names,
    _require,
    _unknown,
    check_hyperparam,
    parse_value,
)
from ndebench.platform.spec.sweepspec import (
    BASE_SCOPES,
    PROTOCOLS,
    AshaConfig,
    ConfigError,
    EvaluateConfig,
    ReportConfig,
    Resources,
    Space,
    SweepSpec,
    TrainingConfig,
    TuneConfig,
    Value,
)
from ndebench.regularizers.none import BASELINE

__all__ = [
    "AshaConfig", "ConfigError", "EvaluateConfig", "ReportConfig", "Resources", "Space", "SweepSpec",
    "TrainingConfig", "TuneConfig", "Value", "apply_overrides", "check_study_name", "config_hash", "load_spec",
    "parse_spec", "parse_value", "searched_keys",
]

VARIANT_MODES = ("grid",)


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
    try:
        spec = parse_spec(apply_overrides(raw, overrides) if overrides else raw, config_dir=path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return dataclasses.replace(spec, source=str(path.resolve()), overrides=tuple(overrides))


def _plugins(raw: Any, config_dir: Path | None) -> tuple[str, ...]:
    """``plugins:``, modules imported before anything is looked up by name, so their components register; each
    as :func:`~ndebench.platform.common.plugins.resolve_plugins` finds it (a name, or a file's absolute path)."""
    from ndebench.platform.common.plugins import PluginError, import_plugins, resolve_plugins

    _require("plugins", raw, typed.either(typed.one_of(None), typed.sequence_of(typed.text)))
    try:
        modules = resolve_plugins(tuple(raw or ()), config_dir)
        import_plugins(modules)
    except PluginError as exc:
        raise ConfigError(str(exc)) from None
    return modules


def parse_spec(raw: Any, config_dir: Path | None = None) -> SweepSpec:
    """Validate a config mapping (as loaded from YAML) into a :class:`SweepSpec`; ``plugins:`` files are looked
    for beside the config, in ``config_dir``, and in the working directory."""
    raw = _mapping(raw, "config")
    _unknown(set(raw), TOP_KEYS, "the config's top level")
    study = check_study_name(raw.get("study"))
    plugins = _plugins(raw.get("plugins"), config_dir)
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


# MLflow's longest experiment tag value (mlflow.utils.validation.MAX_EXPERIMENT_TAG_VAL_LENGTH, compared in
# tests/test_config.py): a literal, so that loading a config on a node without MLflow works.
MAX_NOTE_LENGTH = 20_000


def _check_description(text: str) -> None:
    """The description becomes the study run's MLflow note, a tag value with a length limit."""
    if len(text) > MAX_NOTE_LENGTH:
        raise ConfigError(f"description has {len(text):,} characters; MLflow stores at most "
                          f"{MAX_NOTE_LENGTH:,} (the study's note)")


# Where and how a trial runs, not what it computes: left out of its identity, recorded as its params.
ENVIRONMENT_KEYS = frozenset({"data_dir", "device", "training.threads"})
# A variant's fixed values under the names its label gives them: already in the config under their flat keys and in
# its label (``variant``), so runs recorded before the key existed keep their hash.
NAMING_KEYS = frozenset({"fixed"})


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of a resolved (fully fixed) trial config: the experiment's identity (model, dataset and
    its options, regularizer, hyperparameters, training, solver, seed, phase) without :data:`ENVIRONMENT_KEYS`,
    so that a resume from another data directory, device or CPU count recognises what already ran; nor
    :data:`NAMING_KEYS`, which repeat what the config holds."""
    payload = json.dumps({k: config[k] for k in sorted(config) if k not in ENVIRONMENT_KEYS | NAMING_KEYS},
                         sort_keys=True, default=str)
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
    base_training = _base_training(base_raw.pop("training", None))
    base_scope = base_raw.pop("scope", "shared")
    if base_scope not in BASE_SCOPES:
        raise ConfigError(f"base.scope={base_scope!r}; valid: {', '.join(BASE_SCOPES)} (shared: one base config per "
                          "(model, dataset), searched without a regularizer; per_regularizer: one per regularizer, "
                          "searched with it on at its grid's middle point)")
    searched = sorted(k for k in base_training if isinstance(spec.training.get(k), Space))
    if searched:
        raise ConfigError(f"base.training: {searched} are searched in training:, so the base stage chooses them")
    _unknown(set(base_raw), {"num_samples", "sampler", "n_startup_trials", "scheduler", "asha", "max_concurrent",
                             "select"}, "base")
    base = _check_search(dataclasses.replace(spec.tune, **base_raw), "base")
    variants = {name: _variant_values(spec, name, how) for name, how in
                _mapping(raw.get("variants"), "variants").items()}
    shared_spaces = [f"{section}.{k}" for section, values in (("model", spec.model), ("training", spec.training))
                     for k, v in values.items() if isinstance(v, Space)]
    if variants and protocol == "joint" and shared_spaces:
        raise ConfigError(f"variants need fixed model/training values under protocol: joint "
                          f"(searched: {shared_spaces}); "
                          "use protocol: paper, where variants take the base stage's values")
    overrides = _split_model_section(raw.get("model"), spec.models)[1]
    out = dataclasses.replace(spec, protocol=protocol, base=base, base_epochs=epochs, base_training=base_training,
                              variants=variants, model_overrides=overrides, base_scope=base_scope)
    check_grids(out)
    return out


def _base_training(raw: Any) -> dict[str, Any]:
    """``base.training``: fixed ``training.*`` values of the base stage's trials (e.g. ``{lr_step: 5}``, the
    reference's StepLR(5, 0.5) in its 10-epoch tuning trials); their epochs are ``base.epochs``."""
    values = dict(_mapping(raw, "base.training"))
    if "epochs" in values:
        raise ConfigError("base.training.epochs: set the base stage's epochs with base.epochs")
    valid = {f.name for f in dataclasses.fields(TrainingConfig)} - {"epochs"}
    _unknown(set(values), valid, "base.training")
    rules = typed.dataclass_rules(TrainingConfig)
    for key, value in values.items():
        if isinstance(value, (list, dict)):
            raise ConfigError(f"base.training.{key}={value!r}: base-stage training values are fixed, not searched")
        _require(f"base.training.{key}", value, rules[key])
    return values


def _variant_values(spec: SweepSpec, name: str, how: Any) -> dict[str, tuple[Any, ...]]:
    """``variants.<name>``: ``grid`` (every point of the regularizer's searched lists) or a mapping of its
    hyperparameters to the values its variant cells take (``{n_mc: [5]}``: ``none`` averaged over 5 passes, the
    control of Continuum Dropout's MC average on SDE models), which may also fix keys of ``model:``
    (``{model.hidden_size: [16, 64]}``: one cell per hidden size)."""
    where = f"variants.{name}"
    if name not in spec.regularizers:
        raise ConfigError(f"{where}: not one of the sweep's regularizers {list(spec.regularizers)}")
    spaces = {k: v for k, v in spec.regularizers[name].items() if isinstance(v, Space)}
    if how == "grid":
        if not spaces or any(v.kind != "choice" for v in spaces.values()):
            raise ConfigError(f"{where}: expanding needs a categorical grid (lists) of its hyperparameters; "
                              f"got {spaces or 'nothing searched'}")
        return {k: v.args for k, v in spaces.items()}
    if not isinstance(how, dict) or not how:
        raise ConfigError(f"{where}={how!r}; valid: {', '.join(VARIANT_MODES)} or a mapping of its "
                          f"hyperparameters to lists of values, e.g. {where}: {{n_mc: [5]}}")
    model_keys = {k for k in how if k.startswith("model.")}
    _unknown(model_keys, {f"model.{k}" for k in spec.model}, where)
    _unknown(set(how) - model_keys, set(spec.regularizers[name]), where)
    missing = sorted(set(spaces) - set(how))
    if missing:
        raise ConfigError(f"{where}: give values of every hyperparameter it searches ({missing}), or use grid")
    values = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in how.items()}
    for key, choices in values.items():
        if not choices or len(set(map(repr, choices))) != len(choices):
            raise ConfigError(f"{where}.{key}={list(choices)!r} must list distinct values")
        for value in choices if key not in model_keys else ():
            check_hyperparam(name, key, value, f"{where}.{key}")
    if not spaces and not model_keys and all(choices == (spec.regularizers[name][k],)
                                             for k, choices in values.items()):
        raise ConfigError(f"{where}={how!r} is the {name} cell itself; give other values")
    if name == BASELINE and not model_keys and not variant_models(spec, name):
        raise ConfigError(f"{where}: {name}'s variants (n_mc > 1 averages passes) differ from {name} only on SDE "
                          f"models, and models {list(spec.models)} have none")
    return values
