"""Typed checks for config fields: each rule maps a value to ``None`` (valid) or what the value must be.

YAML hands the config over as Python scalars, and Python's ``bool`` is an ``int``: ``epochs: yes`` would pass
an ``isinstance(v, int)`` test and ``lr: .inf`` a ``> 0`` one. These rules refuse both at the edge, so that
nothing downstream meets a value of the wrong type. :func:`hint_rule` derives a rule from a dataclass field's
type annotation (``int``, ``float``, ``str``, ``bool``, ``X | None``, ``tuple[int, ...]``), which is how the
config's dataclasses are type-checked without repeating their annotations.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any

Rule = Callable[[Any], "str | None"]


def is_int(value: Any) -> bool:
    """An integer that is not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite int or float that is not a boolean."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"  # ints exactly: 4294967295, not 4.29497e+09


def _bounds(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{_num(low)}, {_num(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {_num(low)}"
    return "" if high is None else f"{'<' if high_open else '<='} {_num(high)}"


def _within(value: float, low: float | None, high: float | None, low_open: bool, high_open: bool) -> bool:
    above = low is None or (value > low if low_open else value >= low)
    below = high is None or (value < high if high_open else value <= high)
    return above and below


def _ranged(kind: str, accepts: Callable[[Any], bool], low: float | None, high: float | None, low_open: bool,
            high_open: bool, null: bool) -> Rule:
    want = " ".join(filter(None, (kind, _bounds(low, high, low_open, high_open))))
    want = f"null or {want}" if null else want

    def rule(value: Any) -> str | None:
        if null and value is None:
            return None
        ok = accepts(value) and _within(value, low, high, low_open, high_open)
        return None if ok else f"must be {want}"

    return rule


def integer(low: int | None = None, high: int | None = None, *, null: bool = False) -> Rule:
    """An integer (never a boolean) in ``[low, high]``; ``null`` also accepts ``None``."""
    return _ranged("an integer", is_int, low, high, False, False, null)


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False, null: bool = False) -> Rule:
    """A finite number (int or float, never a boolean, NaN or infinity) between ``low`` and ``high``."""
    return _ranged("a finite number", is_number, low, high, low_open, high_open, null)


def one_of(*choices: Any) -> Rule:
    """Exactly one of ``choices`` (``True`` never stands in for ``1``)."""
    def rule(value: Any) -> str | None:
        ok = any(value == c and type(value) is type(c) for c in choices)
        return None if ok else "must be one of " + ", ".join(repr(c) for c in choices)

    return rule


def either(*rules: Rule) -> Rule:
    """Valid when any of ``rules`` accepts the value."""
    def rule(value: Any) -> str | None:
        problems = [r(value) for r in rules]
        if any(p is None for p in problems):
            return None
        return "must be " + " or ".join(p.removeprefix("must be ") for p in problems if p)

    return rule


def text(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def sequence_of(item: Rule) -> Rule:
    """A list (or tuple) whose items all satisfy ``item``."""
    def rule(value: Any) -> str | None:
        if not isinstance(value, (list, tuple)):
            return "must be a list"
        for v in value:
            issue = item(v)
            if issue:
                return f"must be a list; its item {v!r} {issue}"
        return None

    return rule


_SCALARS: dict[Any, Rule] = {int: integer(), float: number(), str: text, bool: boolean}


def hint_rule(hint: Any) -> Rule:
    """The type rule of an annotation: ``int``, ``float`` (ints allowed), ``str``, ``bool``, unions such as
    ``int | None`` or ``int | str``, ``Literal[...]`` and ``tuple[X, ...]``; anything else accepts every value."""
    origin = typing.get_origin(hint)
    if hint in _SCALARS:
        return _SCALARS[hint]
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        rules = [hint_rule(a) for a in args if a is not type(None)]
        nullable = type(None) in args
        combined = either(*rules) if len(rules) > 1 else rules[0]
        return either(lambda v: None if v is None else "must be null", combined) if nullable else combined
    if origin is typing.Literal:
        return one_of(*typing.get_args(hint))
    if origin in (tuple, list):
        args = typing.get_args(hint)
        return sequence_of(hint_rule(args[0])) if args else sequence_of(lambda v: None)
    return lambda value: None


def checked(default: Any, rule: Rule) -> Any:
    """A dataclass field with ``default`` whose values must pass ``rule`` (kept beside its definition, read by
    :func:`dataclass_rules`)."""
    return dataclasses.field(default=default, metadata={"rule": rule})


def dataclass_rules(cls: type) -> dict[str, Rule]:
    """One rule per field of dataclass ``cls``: the field's own (:func:`checked`), else the rule of its (possibly
    string) type annotation."""
    hints = typing.get_type_hints(cls)
    return {f.name: f.metadata.get("rule") or hint_rule(hints[f.name]) for f in dataclasses.fields(cls)}


def problem(where: str, value: Any, rule: Rule) -> str | None:
    """``"<where>=<value!r> must be ..."`` when ``rule`` refuses ``value``, else ``None``."""
    issue = rule(value)
    return None if issue is None else f"{where}={value!r} {issue}"
