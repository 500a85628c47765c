"""Models, regularizers and datasets from outside the package: entry points and ``plugins:`` modules.

A package adds components by registering them at import time (``@register_model(...)`` etc.) in a module
that it names under one of the entry-point groups ``ndebench.models``, ``ndebench.regularizers`` or
``ndebench.datasets`` (``[project.entry-points."ndebench.models"] mine = "my_pkg.models"``), or that a sweep
lists under ``plugins:``. Each registry imports its group on first use, in the driver and in every Ray
worker alike, so a plugin needs no fork and no code on the worker beyond being installed.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points

_LOADED: set[tuple[str, str]] = set()


class PluginError(ImportError):
    """A plugin module could not be imported; the message names it and where it was declared."""


def load_entry_points(group: str) -> None:
    """Import every module declared under entry-point ``group`` that this process has not imported yet, so a
    plugin installed after the first lookup is found by the next one."""
    for point in entry_points(group=group):
        if (group, point.value) in _LOADED:
            continue
        _LOADED.add((group, point.value))
        try:
            point.load()
        except Exception as exc:  # noqa: BLE001 - any import failure of a third-party module is reported the same way
            raise PluginError(
                f"plugin {point.name!r} of entry-point group {group!r} ({point.value}) failed to import: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def import_plugins(modules: list[str] | tuple[str, ...]) -> None:
    """Import the modules a sweep lists under ``plugins:`` so that their components register."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - see load_entry_points
            raise PluginError(f"plugins: module {name!r} failed to import: {type(exc).__name__}: {exc}") from exc
