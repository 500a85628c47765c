"""A name -> factory registry shared by the model, regularizer and dataset folders."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ndebench.platform.common.plugins import load_entry_points

T = TypeVar("T")
InfoT = TypeVar("InfoT")


class UnknownNameError(KeyError):
    """Raised for a name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Generic[T, InfoT]):
    """Maps names to factories and to what is known about each (its info record).

    ``register(name, info)`` is a decorator; ``create(name, **kwargs)`` calls the factory; ``info(name)``
    returns the record filed with it; ``names()`` lists the registered names in sorted order. Unknown and
    duplicate names raise errors that list the valid names, so a typo in a sweep config is answered with
    the choices.

    ``builtins`` (the modules whose import registers the built-in components, e.g. those a plugin folder's
    ``catalog.py`` names) and ``entry_point`` (the
    entry-point group of plugins, :mod:`ndebench.platform.common.plugins`) are loaded on the first lookup, so a
    registry is complete whichever module asks first, in the driver and in every Ray worker.
    """

    def __init__(self, kind: str, *, builtins: str | Sequence[str] = (), entry_point: str | None = None) -> None:
        self.kind = kind
        self.builtins = (builtins,) if isinstance(builtins, str) else tuple(builtins)
        self.entry_point = entry_point
        self._factories: dict[str, Callable[..., T]] = {}
        self._info: dict[str, InfoT] = {}
        self._loaded = False

    def register(self, name: str, info: InfoT | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is already registered; registered: {self.names()}")
            self._factories[name] = factory
            if info is not None:
                self._info[name] = info
            return factory

        return decorator

    def load(self) -> None:
        """Import the built-in components and the plugins of the entry-point group (once)."""
        if self._loaded:
            return
        for module in self.builtins:
            importlib.import_module(module)
        if self.entry_point:
            load_entry_points(self.entry_point)
        self._loaded = True

    def _find(self, name: str) -> Callable[..., T] | None:
        self.load()
        if name not in self._factories and self.entry_point:
            load_entry_points(self.entry_point)  # a plugin installed since the first lookup
        return self._factories.get(name)

    def get(self, name: str) -> Callable[..., T]:
        factory = self._find(name)
        if factory is None:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid {self.kind}s: {', '.join(self.names())}")
        return factory

    def info(self, name: str) -> InfoT:
        """The record registered with ``name`` (``UnknownNameError`` listing the valid names if none)."""
        self.get(name)
        return self._info[name]

    def create(self, name: str, **kwargs: Any) -> T:
        return self.get(name)(**kwargs)

    def names(self) -> list[str]:
        self.load()
        return sorted(self._factories)

    def __contains__(self, name: str) -> bool:
        return self._find(name) is not None
