"""Validity checks for regularizer hyperparameters: each returns ``None`` or what the value must be."""
from __future__ import annotations

import math
from typing import Any, Callable


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def open_unit(value: Any) -> str | None:
    return None if _number(value) and 0.0 < value < 1.0 else "must lie in the open interval (0, 1)"


def positive(value: Any) -> str | None:
    return None if _number(value) and value > 0.0 else "must be a finite number > 0"


def non_negative(value: Any) -> str | None:
    return None if _number(value) and value >= 0.0 else "must be a finite number >= 0"


def integer_at_least(low: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
        return None if ok else f"must be an integer >= {low}"

    return check
