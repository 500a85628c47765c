"""A command's sweep config: its ``--set`` overrides, and every error of it printed as ``FILE:LINE: message``
(the linter's, then the full validation's, :func:`ndebench.platform.spec.lint.locate`) before anything runs."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ndebench.platform.failures import exitcodes

if TYPE_CHECKING:
    from ndebench.platform.spec.lint import Problem
    from ndebench.platform.spec.sweepspec import SweepSpec


def overrides(args: argparse.Namespace) -> list[str]:
    return [item for group in (args.set or []) for item in group]


def lint(args: argparse.Namespace) -> int | None:
    """Every error of the config file that needs no registry, each on a line with its line number, before torch,
    Ray or MLflow is imported: exit 2 when there is one. A shipped config's name becomes its path."""
    from ndebench.platform.spec.lint import lint_file
    from ndebench.platform.spec.shipped import resolve_config
    from ndebench.platform.spec.sweepspec import ConfigError

    try:
        args.config = resolve_config(args.config)
    except ConfigError as exc:
        print(f"ndebench {args.command}: error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    return _refuse(args, lint_file(args.config, overrides(args)))


def _refuse(args: argparse.Namespace, problems: Sequence[Problem]) -> int | None:
    """Print ``problems`` as ``file:line: message`` lines and a count; exit 2 when there is one."""
    for problem in problems:
        print(problem.format(args.config), file=sys.stderr)
    if problems:
        print(f"ndebench {args.command}: {len(problems)} error(s) in {args.config}; nothing was run", file=sys.stderr)
        return exitcodes.BAD_INPUT
    return None


def located(args: argparse.Namespace, exc: Exception) -> int:
    """A full-validation error printed in the linter's ``file:line: message`` form (a file it cannot read: as
    ``error:``); the exit code."""
    from ndebench.platform.spec.lint import locate

    if (problem := locate(args.config, str(exc))) is None:
        print(f"ndebench {args.command}: error: {exc}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    return _refuse(args, [problem]) or exitcodes.BAD_INPUT


def load(args: argparse.Namespace) -> SweepSpec | int:
    """The config's spec, or the exit code once its errors were printed: the first full-validation error and
    those :func:`later_errors` finds, each as ``FILE:LINE: message`` (:func:`located`)."""
    from ndebench.platform import api
    from ndebench.platform.spec.lint import locate
    from ndebench.platform.spec.sweepspec import ConfigError

    try:
        spec = api.load(args.config, overrides(args))
    except ConfigError as exc:
        later = [problem for message in later_errors(args, str(exc)) + _raw_dataset_errors(args)
                 if (problem := locate(args.config, message)) is not None]
        return (_refuse(args, [first, *later]) if later and (first := locate(args.config, str(exc))) is not None
                else located(args, exc))
    problems = [locate(args.config, message)
                for message in dataset_errors(spec.datasets, getattr(args, "data_dir", None) or spec.data_dir)]
    return _refuse(args, [p for p in problems if p is not None]) or spec


def data_problems(spec: SweepSpec, data_dir: str | None) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` of the sweep's data, read as ``run`` reads it before Ray starts
    (:func:`ndebench.datasets.check.preflight_problems`: an archive set's files have every value parsed, so a
    corrupt one is named with its file and line); files not on disk here are a warning (validate may run where
    the data is not)."""
    from ndebench.datasets.check import dataset_status, preflight_problems

    errors, warnings = [], []
    for name in spec.datasets:
        status = dataset_status(name, data_dir)
        if status["available"]:
            errors += preflight_problems(name, data_dir)
        else:
            warnings.append(f"dataset {name!r} has no files in {status['data_dir']}; `ndebench run` refuses it until "
                            f"they are there (`ndebench datasets check {name}` says which)")
    return errors, warnings


def dataset_errors(names: Sequence[str], data_dir: str | None) -> list[str]:
    """A dataset read by name (an archive set, ``uea/<Name>``) that is neither a member its family knows nor on
    disk in ``data_dir``: a typo or a set not imported, with the closest names."""
    import difflib

    from ndebench.datasets.check import dataset_status
    from ndebench.datasets.registry import dataset_info, list_datasets
    from ndebench.platform.common.registry import UnknownNameError

    errors = []
    for name in names:
        try:
            info = dataset_info(name)
        except UnknownNameError:
            continue  # the full validation names it
        if info.member is None or info.member in info.members() or dataset_status(name, data_dir)["available"]:
            continue
        close = difflib.get_close_matches(name, list_datasets(), n=3, cutoff=0.8)
        errors.append(f"datasets: {name!r} is no set the registry knows and has no files in the data directory"
                      + (f" (did you mean {' or '.join(map(repr, close))}?)" if close else "")
                      + f"; `ndebench datasets check {name}` says which files go where")
    return errors


def _raw_dataset_errors(args: argparse.Namespace) -> list[str]:
    """:func:`dataset_errors` of the ``datasets`` list of a config that does not validate."""
    import yaml
    from ndebench.platform.spec.config import apply_overrides

    try:
        raw = apply_overrides(yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}, overrides(args))
    except (OSError, ValueError, yaml.YAMLError):
        return []
    names = raw.get("datasets") if isinstance(raw, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return []
    data_dir = getattr(args, "data_dir", None) or raw.get("data_dir")
    return dataset_errors(names, data_dir if isinstance(data_dir, str) else None)


def later_errors(args: argparse.Namespace, first: str, most: int = 20) -> list[str]:
    """The full-validation errors after ``first``, found in the same pass: the config is validated again with
    the key each error starts with (``training.lr``, ``solver.method``) left out, until it validates, an error
    names no key, or a left-out key is the next error's (a required key: its absence is no error of the file)."""
    import copy

    import yaml
    from ndebench.platform import api
    from ndebench.platform.spec.config import apply_overrides
    from ndebench.platform.spec.sweepspec import ConfigError

    try:
        raw = apply_overrides(yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}, overrides(args))
    except (OSError, ValueError, yaml.YAMLError):
        return []
    found, removed, message, caused = [], [], first.removeprefix(f"{args.config}: "), False
    for _ in range(most):
        if not caused:
            found.append(message)
        if not (key := _error_key(message)) or not _remove(raw, key.split(".")):
            break
        removed.append(key)
        try:
            api.load(copy.deepcopy(raw))
            break
        except ConfigError as exc:
            message = str(exc)
        # An error about a key whose part was left out (an emptied parent) is the removal's: left out in turn.
        next_key = _error_key(message) or ""
        caused = any(r.startswith(f"{next_key}.") for r in removed)
        if any(next_key == r or next_key.startswith(f"{r}.") for r in removed):
            break
    return found[1:]


def _error_key(message: str) -> str | None:
    """The dotted key a full-validation message starts with (``training.lr``), if it starts with one."""
    import re

    head = re.match(r"([A-Za-z_]\w*(?:\.[\w-]+)*)(?:=|:| )", message)
    return head.group(1) if head else None


def _remove(raw: dict, parts: list[str]) -> bool:
    """Delete the dotted key ``parts`` from ``raw``; whether it was there."""
    node = raw
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or parts[-1] not in node:
        return False
    del node[parts[-1]]
    return True
