"""Models, regularizers and datasets from outside the package: entry points and ``plugins:`` modules.

A package adds components by registering them at import time (``@register_model(...)`` etc.) in a module
that it names under one of the entry-point groups ``ndebench.models``, ``ndebench.regularizers`` or
``ndebench.datasets`` (``[project.entry-points."ndebench.models"] mine = "my_pkg.models"``), or that a sweep
lists under ``plugins:``. Each registry imports its group on first use, in the driver and in every Ray
worker alike, so a plugin needs no fork and no code on the worker beyond being installed.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

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


def resolve_plugins(entries: list[str] | tuple[str, ...], config_dir: Path | None = None) -> tuple[str, ...]:
    """Where each ``plugins:`` entry of a config in ``config_dir`` is, as :func:`import_plugins` imports it in the
    driver and in every Ray worker: a module importable as it is stays a name; a module ``name.py`` (or package
    ``name/``) beside the config or in the working directory, or a file path (``.py``, relative to the config's
    folder, else to the working directory), becomes that file's absolute path. Raises :class:`PluginError`
    naming every place looked in."""
    return tuple(_resolved(entry, config_dir) for entry in entries)


def _resolved(entry: str, config_dir: Path | None) -> str:
    folders = list(dict.fromkeys(p.resolve() for p in (config_dir, Path.cwd()) if p is not None))
    if _is_path(entry):
        tried = [Path(entry).expanduser()] if Path(entry).expanduser().is_absolute() else [f / entry for f in folders]
        for path in tried:
            if path.is_file():
                return str(path.resolve())
        raise PluginError(f"plugins: file {entry!r} not found; looked for {', '.join(map(str, tried))}")
    if importlib.util.find_spec(entry.partition(".")[0]) is not None:
        return entry
    relative = Path(*entry.split("."))
    tried = [f / relative.with_suffix(".py") for f in folders] + [f / relative / "__init__.py" for f in folders]
    for path in tried:
        if path.is_file():
            return str(path.resolve())
    raise PluginError(
        f"plugins: module {entry!r} not found on the Python path, nor as {', '.join(map(str, tried))}; name an "
        "installed module, put the file beside the config or in the working directory, give its path "
        "(plugins: [path/to/module.py]), or add its folder to PYTHONPATH")


def _is_path(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry or os.sep in entry


def import_plugins(modules: list[str] | tuple[str, ...]) -> None:
    """Import the modules a sweep lists under ``plugins:`` (as :func:`resolve_plugins` resolved them) so that
    their components register. A file path is imported as its module (``pkg/__init__.py`` as ``pkg``) with its
    folder put first on ``sys.path``, as ``PYTHONPATH`` would, so that its objects pickle by name to Ray's
    workers, which import it the same way."""
    for entry in modules:
        name = entry
        if _is_path(entry):
            path = Path(entry)
            folder, name = (path.parent.parent, path.parent.name) if path.name == "__init__.py" else (path.parent,
                                                                                                    path.stem)
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - see load_entry_points
            raise PluginError(f"plugins: module {entry!r} failed to import: {type(exc).__name__}: {exc}") from exc
        origin = getattr(module, "__file__", None)
        if name != entry and (origin is None or Path(origin).resolve() != Path(entry).resolve()):
            raise PluginError(f"plugins: {entry!r} is module {name!r}, but {name!r} is already imported from "
                              f"{origin}; rename the file")
