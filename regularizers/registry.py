"""Regularizer registry: ``register_regularizer``, ``create_regularizer``, ``list_regularizers``."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ndebench.platform.plugins import load_entry_points
from ndebench.platform.registry import Registry
from ndebench.regularizers.base import Regularizer


@dataclass(frozen=True)
class HyperParam:
    """A regularizer hyperparameter: its default search space (a list of choices) and a validity check."""

    choices: tuple[Any, ...]
    check: Callable[[Any], str | None] = lambda value: None
    help: str = ""


@dataclass(frozen=True)
class RegularizerInfo:
    name: str
    summary: str
    hyperparams: dict[str, HyperParam] = field(default_factory=dict)
    incompatible_models: dict[str, str] = field(default_factory=dict)
    requires_fixed_step: bool = False


_REGISTRY: Registry[Regularizer] = Registry("regularizer")
_INFO: dict[str, RegularizerInfo] = {}


def register_regularizer(
    name: str,
    *,
    summary: str,
    hyperparams: dict[str, HyperParam] | None = None,
    incompatible_models: dict[str, str] | None = None,
    requires_fixed_step: bool = False,
) -> Callable[[type[Regularizer]], type[Regularizer]]:
    """Class decorator registering a regularizer with its one-line summary and default search space.

    ``incompatible_models`` maps model names to the reason the pair cannot work; ``ndebench validate``
    rejects such pairs with that reason, and adaptive solvers when ``requires_fixed_step``.
    """

    def decorator(cls: type[Regularizer]) -> type[Regularizer]:
        _REGISTRY.register(name)(cls)
        _INFO[name] = RegularizerInfo(
            name, summary, dict(hyperparams or {}), dict(incompatible_models or {}), requires_fixed_step
        )
        return cls

    return decorator


def _load_builtins() -> None:
    from ndebench.regularizers import builtin  # noqa: F401  (registration side effect)
    load_entry_points("ndebench.regularizers")


def create_regularizer(name: str, **hyperparams: Any) -> Regularizer:
    """Instantiate the regularizer ``name`` with its hyperparameters (e.g. ``p=0.3, m=10`` for Continuum Dropout)."""
    _load_builtins()
    info = regularizer_info(name)
    unknown = sorted(set(hyperparams) - set(info.hyperparams))
    if unknown:
        raise ValueError(
            f"regularizer {name!r} has no hyperparameter(s) {unknown}; valid: {sorted(info.hyperparams) or 'none'}"
        )
    for key, value in hyperparams.items():
        problem = info.hyperparams[key].check(value)
        if problem:
            raise ValueError(f"regularizer {name!r}: {key}={value!r} {problem}")
    return _REGISTRY.create(name, **hyperparams)


def list_regularizers() -> list[str]:
    _load_builtins()
    return _REGISTRY.names()


def regularizer_info(name: str) -> RegularizerInfo:
    _load_builtins()
    _REGISTRY.get(name)
    return _INFO[name]
