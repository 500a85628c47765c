"""The sweep configs that ship with ndebench (``tune_configs/``, the package ``ndebench.tune_configs`` in a wheel),
found by name: ``ndebench run quickstart`` works from any install, ``ndebench configs`` lists them."""
from __future__ import annotations

from importlib import import_module
from pathlib import Path

import yaml
from ndebench.platform.spec.lint import suggest
from ndebench.platform.spec.sweepspec import ConfigError

PACKAGE = "ndebench.tune_configs"


def shipped_configs() -> dict[str, Path]:
    """Every shipped config by name (its file name without ``.yaml``), sorted."""
    # The package's folders, not importlib.resources.files(): Python 3.11 refuses the non-folder entry that an
    # editable install puts on a namespace package's __path__.
    folders = [Path(entry) for entry in import_module(PACKAGE).__path__ if Path(entry).is_dir()]
    found = sorted((path for folder in folders for path in folder.glob("*.yaml")), key=lambda p: p.name)
    return {path.name.removesuffix(".yaml"): path for path in found}


def describe_shipped() -> list[tuple[str, str]]:
    """``(name, description)`` of each shipped config (its ``description:``)."""
    return [(name, str((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("description", "")))
            for name, path in shipped_configs().items()]


def resolve_config(given: str) -> str:
    """``given`` when it names a file or looks like a path (a ``/`` or a ``.yaml``/``.yml`` suffix), else the
    path of the shipped config of that name; raises :class:`ConfigError` with the shipped names otherwise."""
    if Path(given).exists() or "/" in given or given.endswith((".yaml", ".yml")):
        return given
    shipped = shipped_configs()
    if given in shipped:
        return str(shipped[given])
    raise ConfigError(f"config {given!r} is neither a file nor a shipped config{suggest(given, shipped)}; shipped: "
                      f"{', '.join(shipped)} (`ndebench configs` describes them)")
