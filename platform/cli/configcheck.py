"""A command's sweep config: its ``--set`` overrides, and every error of it printed as ``FILE:LINE: message``
(the linter's, then the full validation's, :func:`ndebench.platform.spec.lint.locate`) before anything runs."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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
    """The config's spec, or the exit code once its error was printed (:func:`located`)."""
    from ndebench.platform import api
    from ndebench.platform.spec.sweepspec import ConfigError

    try:
        return api.load(args.config, overrides(args))
    except ConfigError as exc:
        return located(args, exc)
