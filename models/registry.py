"""Model registry: ``register_model``, ``create_model``, ``list_models``."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ndebench.platform.plugins import load_entry_points
from ndebench.platform.registry import Registry
from torch import nn

InputKind = Literal["timeseries", "image"]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    summary: str
    input_kind: InputKind
    paper: str


_REGISTRY: Registry[nn.Module] = Registry("model")
_INFO: dict[str, ModelInfo] = {}


def register_model(
    name: str, *, summary: str, paper: str, input_kind: InputKind = "timeseries"
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator registering a model with a one-line summary, its paper and the input kind it takes."""

    def decorator(cls: type[nn.Module]) -> type[nn.Module]:
        _REGISTRY.register(name)(cls)
        _INFO[name] = ModelInfo(name, summary, input_kind, paper)
        return cls

    return decorator


def _load_builtins() -> None:
    from ndebench.models import builtin  # noqa: F401  (registration side effect)
    load_entry_points("ndebench.models")


def create_model(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate model ``name``; kwargs are the constructor's
    (``in_channels``, ``num_classes``, ``regularizer``, ...)."""
    _load_builtins()
    return _REGISTRY.create(name, **kwargs)


def list_models() -> list[str]:
    _load_builtins()
    return _REGISTRY.names()


def model_info(name: str) -> ModelInfo:
    _load_builtins()
    _REGISTRY.get(name)
    return _INFO[name]
