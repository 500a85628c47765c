"""Validity checks for regularizer hyperparameters: each returns ``None`` or what the value must be.

Numbers are finite ints or floats, never booleans (:mod:`ndebench.platform.common.fields`). Continuum Dropout's
``p`` and ``m`` accept exactly the range its rate solver handles (:data:`~ndebench.regularizers.rates.P_RANGE`,
:data:`~ndebench.regularizers.rates.M_RANGE`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ndebench.platform.common.fields import integer, is_number
from ndebench.regularizers.rates import check_m, check_p

dropout_rate = check_p
expected_renewals = check_m


def open_unit(value: Any) -> str | None:
    return None if is_number(value) and 0.0 < value < 1.0 else "must lie in the open interval (0, 1)"


def positive(value: Any) -> str | None:
    return None if is_number(value) and value > 0.0 else "must be a finite number > 0"


def non_negative(value: Any) -> str | None:
    return None if is_number(value) and value >= 0.0 else "must be a finite number >= 0"


def integer_at_least(low: int) -> Callable[[Any], str | None]:
    return integer(low)
