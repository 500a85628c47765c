"""Every error of a sweep YAML file at once, with its line and the closest valid key or name, before torch loads.

:func:`lint_file` walks the file's YAML node tree (``yaml.compose``: each node keeps its line) and checks what can
be checked without the registries: every key against its section's keys; the names and keys of models, datasets
and regularizers against the plugin folders' declarations (:mod:`ndebench.models.catalog`,
:mod:`ndebench.datasets.catalog`, :mod:`ndebench.regularizers.catalog`), and regularizer values against their
rules; each setting of the typed sections against its rule (:mod:`ndebench.platform.common.fields`). It never
raises for a config problem: it returns them all, each with a ``difflib`` suggestion where one is close.
:func:`ndebench.platform.spec.config.load_spec` stays the complete validation (value ranges of hyperparameters,
model/dataset/regularizer pairings, solvers, the protocol), run once this finds nothing.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml
from ndebench.datasets.catalog import BUILTINS as DATASETS
from ndebench.models.catalog import BUILTINS as MODELS
from ndebench.models.catalog import SOLVER_KEYS
from ndebench.platform.common import fields as typed
from ndebench.platform.spec.sweepspec import (
    BASE_SCOPES,
    PROTOCOLS,
    AshaConfig,
    ConfigError,
    EvaluateConfig,
    ReportConfig,
    Resources,
    TrainingConfig,
    TuneConfig,
)
from ndebench.regularizers.catalog import BUILTINS

ENTRY_POINT_GROUPS = ("ndebench.models", "ndebench.regularizers", "ndebench.datasets")
FAMILIES = frozenset(name for name, declared in DATASETS.items() if declared.family)

TOP_KEYS = {
    "study", "description", "models", "datasets", "regularizers", "model", "training", "dataset_options",
    "solver", "tune", "evaluate", "resources", "report", "data_dir", "protocol", "base", "variants", "plugins",
}
BASE_KEYS = {"num_samples", "sampler", "n_startup_trials", "scheduler", "asha", "max_concurrent", "select",
             "epochs", "training", "scope"}
SPACE_KINDS = ("choice", "loguniform", "randint", "uniform")
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_NULL = "tag:yaml.org,2002:null"


def check_study_name(study: Any) -> str:
    """A study name is a folder name and an MLflow experiment: letters, digits, ``.``, ``_``, ``-`` (at most 100,
    starting with a letter or digit, no ``..``), so that it never escapes the report or results folder."""
    if not (isinstance(study, str) and STUDY_NAME.fullmatch(study) and ".." not in study):
        raise ConfigError(f"study={study!r} must be a name of letters, digits, '.', '_' and '-' (at most 100, "
                          "starting with a letter or digit, no '..'), e.g. study: my_sweep-1")
    return study


@dataclass(frozen=True)
class Problem:
    """One error of a config file: ``line`` (1-based) of the node at fault, its key path ``where``
    (``training.lr``), and the ``message``."""

    line: int
    where: str
    message: str

    def format(self, path: str) -> str:
        return f"{path}:{self.line}: {self.message}"


def suggest(word: Any, valid: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``valid`` (``difflib`` ratio >= 0.6), else ``""``."""
    close = difflib.get_close_matches(word, list(valid), n=1) if isinstance(word, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def lint_file(path: str | Path, overrides: Sequence[str] = ()) -> list[Problem]:
    """The problems of the config file at ``path``, by line; those under a key that a ``--set`` override
    replaces are left to the full validation. A file that cannot be read gives none here (``load_spec`` says
    why)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    replaced = [item.partition("=")[0].strip() for item in overrides]
    return [p for p in lint_text(text)
            if not any(p.where == key or p.where.startswith(f"{key}.") for key in replaced)]


def locate(path: str | Path, message: str) -> Problem | None:
    """A full-validation error (``ConfigError``'s ``message``) as a :class:`Problem` of the file at ``path``: on the
    line of the deepest key of the dotted path the message starts with (``regularizers.steer.b=2 ...``), else of
    the first name it quotes that the file holds (``regularizer 'steer' cannot be used ...``), else line 1.
    ``None`` when the file is no readable YAML (the message is about the file itself)."""
    message = message.removeprefix(f"{path}: ")
    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    head = re.match(r"[A-Za-z_][\w.]*", message)
    node, found = root, None
    for part in (head.group(0).split(".") if head else ()):
        pair = next(((k, v) for k, v in getattr(node, "value", ()) if isinstance(node, yaml.MappingNode)
                     and isinstance(k, yaml.ScalarNode) and k.value == part), None)
        if pair is None:
            break
        found, node = pair
    if found is None:
        quoted = re.findall(r"'([^']+)'", message)
        found = next((n for name in quoted for n in _scalars(root) if n.value == name), None)
    return Problem(found.start_mark.line + 1 if found is not None else 1, head.group(0) if head else "", message)


def _scalars(node: yaml.Node | None) -> Iterable[yaml.ScalarNode]:
    """Every scalar node below ``node`` (keys included), in document order."""
    if isinstance(node, yaml.ScalarNode):
        yield node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _scalars(key)
            yield from _scalars(value)


def lint_text(text: str) -> list[Problem]:
    """The problems of a config given as YAML text, sorted by line."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None:
            _value(root)  # what only construction finds: unknown tags, unhashable keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = " ".join(filter(None, (getattr(exc, "context", None), getattr(exc, "problem", None)))) or str(exc)
        return [Problem(mark.line + 1 if mark else 1, "", f"not valid YAML: {what}")]
    if root is None:
        return []
    out: list[Problem] = []
    top = _entries(root, "config", out)
    if top is not None:
        _check_config(root, top, out)
    return sorted(out, key=lambda p: p.line)


def _check_config(root: yaml.Node, top: dict[str, tuple[yaml.Node, yaml.Node]], out: list[Problem]) -> None:
    _unknown_keys(top, TOP_KEYS, "", "the config's top level", out)
    value = {key: node for key, (_, node) in top.items()}
    if "study" not in value:
        out.append(Problem(root.start_mark.line + 1, "study", "study: missing; name the study, e.g. study: my_sweep"))
    else:
        try:
            check_study_name(_value(value["study"]))
        except ConfigError as exc:
            _add(out, value["study"], "study", str(exc))
    open_names = "plugins" in value or any(entry_points(group=group) for group in ENTRY_POINT_GROUPS)
    models = _names(value.get("models"), "models", "model", _registered("models") | MODELS, open_names, out,
                    root)
    datasets = _names(value.get("datasets"), "datasets", "dataset", _registered("datasets") | DATASETS,
                      open_names, out, root)
    regularizers = _check_regularizers(value.get("regularizers"), open_names, out, root)
    _check_model_section(value.get("model"), models, out)
    _check_fields(value.get("training"), TrainingConfig, "training", out, searchable=True)
    _check_solver(value.get("solver"), out)
    _check_tune(value.get("tune"), out)
    _check_base(value.get("base"), out)
    for key, cls in (("evaluate", EvaluateConfig), ("resources", Resources), ("report", ReportConfig)):
        _check_fields(value.get(key), cls, key, out)
    _check_rule(value.get("protocol"), "protocol", typed.one_of(*PROTOCOLS), out, PROTOCOLS)
    _check_rule(value.get("description"), "description", typed.text, out)
    _check_rule(value.get("data_dir"), "data_dir", typed.hint_rule(str | None), out)
    families = {d.partition("/")[0] for d in datasets}
    if families and families <= set(DATASETS):
        options = {o for family in families for o in DATASETS[family].options}
        _check_keys(value.get("dataset_options"), options, "dataset_options", out)
    _check_keys(value.get("variants"), regularizers, "variants", out)


def _check_regularizers(node: yaml.Node | None, open_names: bool, out: list[Problem], root: yaml.Node) -> list[str]:
    """``regularizers:`` as a list of names or a mapping of names to their hyperparameters."""
    if not isinstance(node, yaml.MappingNode):
        return _names(node, "regularizers", "regularizer", _registered("regularizers") | BUILTINS,
                      open_names, out, root)
    entries = _entries(node, "regularizers", out) or {}
    registered = _registered("regularizers")
    for name, (key_node, params) in entries.items():
        if name in BUILTINS:
            _check_keys(params, BUILTINS[name].hyperparams, f"regularizers.{name}", out)
            _check_hyperparams(name, params, out)
        elif not open_names and name not in registered:
            _add(out, key_node, f"regularizers.{name}", f"regularizers: unknown regularizer {name!r}"
                 f"{suggest(name, BUILTINS)}; valid: {', '.join(BUILTINS)}")
    return list(entries)


def _check_hyperparams(name: str, node: yaml.Node, out: list[Problem]) -> None:
    """The values of a built-in regularizer's hyperparameters, each candidate of a search space (a list's items, a
    distribution's bounds) as the full validation reads them; the first refused one per key is a problem."""
    if not isinstance(node, yaml.MappingNode):
        return
    rules = {key: hp.rule for key, hp in BUILTINS[name].hyperparams.items()}
    for key, (_, value_node) in (_entries(node, f"regularizers.{name}", []) or {}).items():
        if key not in rules:
            continue
        value = _value(value_node)
        candidates = [value]
        if isinstance(value, list):
            candidates = value
        elif isinstance(value, dict):
            args = next(iter(value.values()), None) if len(value) == 1 else None
            candidates = args if next(iter(value), None) in SPACE_KINDS and isinstance(args, list) else []
        where = f"regularizers.{name}.{key}"
        if problem := next(filter(None, (typed.problem(where, c, rules[key]) for c in candidates)), None):
            _add(out, value_node, where, problem)


def _check_model_section(node: yaml.Node | None, models: list[str], out: list[Problem]) -> None:
    """``model:``: shared hyperparameters, valid for every listed model, and per-model blocks."""
    entries = _entries(node, "model", out) if node is not None else None
    known = [m for m in models if m in MODELS]
    if not entries or not known:
        return
    shared = sorted(set.intersection(*(set(MODELS[m].hyperparams) for m in known)))
    for key, (key_node, value) in entries.items():
        if key in MODELS:
            if key not in models:
                _add(out, key_node, f"model.{key}", f"model.{key}: a block for model {key!r}, which is not in "
                     f"models {models}")
            else:
                _check_keys(value, MODELS[key].hyperparams, f"model.{key}", out)
            continue
        lacking = [m for m in known if key not in MODELS[m].hyperparams]
        if lacking:
            _add(out, key_node, f"model.{key}", f"model: {key!r} is not a hyperparameter of model(s) "
                 f"{', '.join(lacking)}{suggest(key, shared)}; valid: {', '.join(shared)} (or a per-model block)")


def _check_solver(node: yaml.Node | None, out: list[Problem]) -> None:
    """``solver:``: settings directly, or per model name (or ``default``) a block of them."""
    entries = _entries(node, "solver", out) if node is not None else None
    for key, (key_node, value) in (entries or {}).items():
        if key == "default" or key in MODELS:
            _check_keys(value, SOLVER_KEYS, f"solver.{key}", out)
        elif key not in SOLVER_KEYS:
            valid = [*SOLVER_KEYS, *MODELS]
            _add(out, key_node, f"solver.{key}", f"solver: unknown key {key!r}{suggest(key, valid)}; valid: "
                 f"{', '.join(SOLVER_KEYS)}, or a model name with a block of them")


def _check_tune(node: yaml.Node | None, out: list[Problem]) -> None:
    entries = _check_fields(node, TuneConfig, "tune", out)
    if entries and "asha" in entries:
        _check_fields(entries["asha"][1], AshaConfig, "tune.asha", out)
    if entries and "metric" in entries:
        metric_node = entries["metric"][1]
        metric = _value(metric_node)
        if not (isinstance(metric, str) and metric.startswith("val_")):
            _add(out, metric_node, "tune.metric", f"tune.metric={metric!r} must be a validation metric "
                 "(val_loss, val_accuracy, val_auroc, ...)")


def _check_base(node: yaml.Node | None, out: list[Problem]) -> None:
    entries = _entries(node, "base", out) if node is not None else None
    if not entries:
        return
    _unknown_keys(entries, BASE_KEYS, "base.", "base", out)
    rules = typed.dataclass_rules(TuneConfig) | {"epochs": typed.integer(1, null=True),
                                                 "scope": typed.one_of(*BASE_SCOPES)}
    for key, (_, value) in entries.items():
        if key == "asha":
            _check_fields(value, AshaConfig, "base.asha", out)
        elif key == "training":
            _check_keys(value, [f.name for f in dataclasses.fields(TrainingConfig) if f.name != "epochs"],
                        "base.training", out)
        elif key in rules:
            _check_rule(value, f"base.{key}", rules[key], out)


def _check_fields(node: yaml.Node | None, cls: type, where: str, out: list[Problem],
                  searchable: bool = False) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
    """A section read into dataclass ``cls``: its keys are the fields, each value passes the field's rule
    (every candidate of a search space where ``searchable``)."""
    entries = _entries(node, where, out) if node is not None else None
    if not entries:
        return entries
    rules = typed.dataclass_rules(cls)
    _unknown_keys(entries, set(rules), f"{where}.", where, out)
    for key, (_, value) in entries.items():
        if key in rules and not (cls is TuneConfig and key == "asha"):
            _check_rule(value, f"{where}.{key}", rules[key], out, searchable=searchable)
    return entries


def _check_rule(node: yaml.Node | None, where: str, rule: typed.Rule, out: list[Problem],
                choices: Sequence[str] = (), searchable: bool = False) -> None:
    if node is None:
        return
    value = _value(node)
    candidates = [value]
    if searchable and isinstance(value, list):
        candidates = value
    elif searchable and isinstance(value, dict) and len(value) == 1 and next(iter(value)) in SPACE_KINDS:
        args = next(iter(value.values()))
        candidates = args if isinstance(args, list) and next(iter(value)) == "choice" else []
    for candidate in candidates:
        if issue := typed.problem(where, candidate, rule):
            _add(out, node, where, issue + suggest(candidate, choices))
            return


def _check_keys(node: yaml.Node | None, valid: Iterable[str], where: str, out: list[Problem]) -> None:
    entries = _entries(node, where, out) if node is not None else None
    if entries:
        _unknown_keys(entries, set(valid), f"{where}.", where, out)


def _names(node: yaml.Node | None, where: str, kind: str, valid: dict[str, Any], open_names: bool,
           out: list[Problem], root: yaml.Node) -> list[str]:
    """A list of distinct names, each registered (a dataset as ``family`` or ``family/member``)."""
    if node is None or node.tag == _NULL:
        out.append(Problem(root.start_mark.line + 1, where, f"{where}: missing; name at least one {kind}, e.g. "
                           f"{where}: [{next(iter(valid))}]"))
        return []
    if not isinstance(node, yaml.SequenceNode):
        _add(out, node, where, f"{where}={_value(node)!r} must be a list of names, e.g. {where}: [{_value(node)}]")
        return []
    found: list[str] = []
    for item in node.value:
        name = _value(item)
        if not isinstance(name, str):
            _add(out, item, where, f"{where}: {name!r} is not a name")
            continue
        if name in found:
            _add(out, item, where, f"{where}: {name!r} listed more than once; list each once")
        found.append(name)
        if problem := (None if open_names else _name_problem(name, kind, valid)):
            _add(out, item, where, f"{where}: {problem}")
    return found


def _registered(folder: str) -> dict[str, tuple[str, ...]]:
    """Components registered in this process beyond the built-ins (a notebook's or a test's ``@register_*``), read
    only where the registry is already imported (so torch is too): their keys are left to the registry."""
    module = sys.modules.get(f"ndebench.{folder}.registry")
    return {name: () for name in module.REGISTRY.names()} if module is not None else {}


def _name_problem(name: str, kind: str, valid: dict[str, Any]) -> str | None:
    family, slash, member = name.partition("/")
    listed = [f"{n}/<member>" if n in FAMILIES else n for n in valid] if kind == "dataset" else valid
    if family not in valid:
        return f"unknown {kind} {name!r}{suggest(name if not slash else family, valid)}; valid: {', '.join(listed)}"
    if kind != "dataset":
        return None if not slash else f"unknown {kind} {name!r}; valid: {', '.join(listed)}"
    if family not in DATASETS:
        return None  # registered in this process: its members are the registry's to check
    if family in FAMILIES and not member:
        return f"dataset {name!r} needs a member, e.g. {family}/BasicMotions (`ndebench datasets list`)"
    if family not in FAMILIES and slash:
        return f"dataset {family!r} takes no '/<member>' suffix (got {name!r})"
    return None


def _entries(node: yaml.Node, where: str, out: list[Problem]) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
    """A mapping node's (key node, value node) by key; ``{}`` for null; ``None`` (and a problem) otherwise.
    A key given twice is a problem (plain YAML would keep the last silently)."""
    if node.tag == _NULL:
        return {}
    if not isinstance(node, yaml.MappingNode):
        _add(out, node, where, f"{where} must be a mapping, got {_value(node)!r}")
        return None
    entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = _value(key_node)
        if key in entries:
            _add(out, key_node, f"{where}.{key}", f"{where}: duplicate key {key!r} (first on line "
                 f"{entries[key][0].start_mark.line + 1}); each key may appear once per mapping")
        entries[key] = (key_node, value_node)
    return entries


def _unknown_keys(entries: dict[str, tuple[yaml.Node, yaml.Node]], valid: set[str] | Iterable[str], prefix: str,
                  where: str, out: list[Problem]) -> None:
    valid = sorted(valid)
    for key, (key_node, _) in entries.items():
        if key not in valid:
            _add(out, key_node, f"{prefix}{key}", f"unknown key {key!r} in {where}{suggest(key, valid)}; valid keys: "
                 f"{', '.join(valid)}")


def _value(node: yaml.Node) -> Any:
    return yaml.SafeLoader("").construct_document(node)


def _add(out: list[Problem], node: yaml.Node, where: str, message: str) -> None:
    out.append(Problem(node.start_mark.line + 1, where, message))
