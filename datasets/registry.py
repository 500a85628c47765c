"""Dataset registry: ``register_dataset``, ``create_dataset``, ``list_datasets``.

Names are either plain (``synthetic``) or a family and a member (``uea/BasicMotions``); a family's factory
receives the member as ``member=``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ndebench.datasets.bundle import DatasetBundle
from ndebench.platform.plugins import load_entry_points
from ndebench.platform.registry import Registry


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    summary: str
    family: bool
    members: Callable[[], list[str]] | None = None
    input_kind: str = "timeseries"


_REGISTRY: Registry[DatasetBundle] = Registry("dataset")
_INFO: dict[str, DatasetInfo] = {}


def register_dataset(
    name: str, *, summary: str, members: Callable[[], list[str]] | None = None, input_kind: str = "timeseries"
) -> Callable[[Callable[..., DatasetBundle]], Callable[..., DatasetBundle]]:
    """Decorator registering a dataset factory ``(*, seed, data_dir, **options) -> DatasetBundle``.

    A family (``members`` given) is named ``<name>/<member>`` and its factory also receives ``member``.
    ``input_kind`` (``timeseries`` or ``image``) decides which models can take the dataset.
    """

    def decorator(factory: Callable[..., DatasetBundle]) -> Callable[..., DatasetBundle]:
        _REGISTRY.register(name)(factory)
        _INFO[name] = DatasetInfo(name, summary, members is not None, members, input_kind)
        return factory

    return decorator


def _load_builtins() -> None:
    from ndebench.datasets import builtin  # noqa: F401  (registration side effect)
    load_entry_points("ndebench.datasets")


def split_name(name: str) -> tuple[str, str | None]:
    """``"uea/BasicMotions"`` -> ``("uea", "BasicMotions")``; ``"synthetic"`` -> ``("synthetic", None)``.

    Raises ``KeyError`` listing the valid names for an unknown dataset or family member.
    """
    _load_builtins()
    family, _, member = name.partition("/")
    info = _INFO.get(family)
    if info is None:
        _REGISTRY.get(family)
    if info.family:
        valid = info.members()
        if member not in valid:
            raise KeyError(f"unknown {family} dataset {member!r} in {name!r}; valid: {', '.join(valid)}")
        return family, member
    if member:
        raise KeyError(f"dataset {family!r} takes no '/<member>' suffix (got {name!r})")
    return family, None


def create_dataset(name: str, **kwargs: Any) -> DatasetBundle:
    """Load dataset ``name`` (``seed``, ``data_dir`` and dataset options such as ``missing_rate`` as kwargs)."""
    family, member = split_name(name)
    if member is not None:
        kwargs["member"] = member
    return _REGISTRY.create(family, **kwargs)


def list_datasets() -> list[str]:
    """Every loadable name: plain datasets and ``family/member`` for each family member."""
    _load_builtins()
    names: list[str] = []
    for family in _REGISTRY.names():
        info = _INFO[family]
        names += [f"{family}/{m}" for m in info.members()] if info.family else [family]
    return names


def dataset_info(name: str) -> DatasetInfo:
    family, _ = split_name(name)
    return _INFO[family]


def dataset_options(name: str) -> list[str]:
    """The options a dataset's factory accepts besides ``seed``, ``data_dir`` and ``member`` (config keys)."""
    import inspect

    family, _ = split_name(name)
    factory = _REGISTRY.get(family)
    parameters = inspect.signature(factory).parameters
    return sorted(k for k in parameters if k not in ("seed", "data_dir", "member"))
