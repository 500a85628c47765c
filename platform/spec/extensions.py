"""Settings that are ndebench's extensions of the Continuum Dropout paper, named as such wherever a config uses them."""
from __future__ import annotations

from ndebench.platform.spec.sweepspec import Space, SweepSpec

SCOPE_TIME = ("continuum_dropout scope: time is ndebench's extension, not the paper's method (the paper keeps a "
              "paused component at its value; 'time' keeps integrating the data's increments); its cells are "
              "never reported under the paper's name")


def _values(value: object) -> tuple[object, ...]:
    return tuple(value.args) if isinstance(value, Space) and value.kind == "choice" else (value,)


def extension_warnings(spec: SweepSpec) -> list[str]:
    """One line per extension the sweep uses: ``continuum_dropout`` with ``scope: time`` fixed, searched or as a
    variant."""
    fixed = spec.regularizers.get("continuum_dropout", {}).get("scope", "increment")
    variant = spec.variants.get("continuum_dropout", {}).get("scope", ())
    return [SCOPE_TIME] if "time" in (*_values(fixed), *variant) else []
