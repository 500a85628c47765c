"""Validity checks for regularizer hyperparameters: each returns ``None`` or what the value must be.

Numbers are finite ints or floats, never booleans (:mod:`ndebench.platform.common.fields`). Continuum Dropout's
``p`` and ``m`` accept exactly the range its rate solver (:mod:`ndebench.regularizers.rates`) handles,
:data:`P_RANGE` and :data:`M_RANGE`. Free of torch and SciPy, so that ``ndebench validate`` reads them through
:mod:`ndebench.regularizers.catalog`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ndebench.platform.common.fields import integer, is_number

P_RANGE = (1e-6, 1.0 - 1e-6)
M_RANGE = (1e-6, 1e6)
SCALES = ("rate", "per_step")


def check_p(p: Any) -> str | None:
    """``None`` when the rate solver accepts dropout rate ``p``, else what ``p`` must be."""
    ok = isinstance(p, (int, float)) and not isinstance(p, bool) and P_RANGE[0] <= p <= P_RANGE[1]
    return None if ok else f"must lie in [{P_RANGE[0]:g}, 1 - {1 - P_RANGE[1]:.0e}] (a dropout rate in (0, 1))"


def check_m(m: Any) -> str | None:
    """``None`` when the rate solver accepts an expected number of renewals ``m``, else what ``m`` must be."""
    ok = isinstance(m, (int, float)) and not isinstance(m, bool) and M_RANGE[0] <= m <= M_RANGE[1]
    return None if ok else f"must lie in [{M_RANGE[0]:g}, {M_RANGE[1]:g}] (expected renewals on [0, T])"


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


def step_mask(value: Any) -> str | None:
    return None if value in ("left", "occupancy") else "must be 'left' or 'occupancy'"


def control_scope(value: Any) -> str | None:
    return None if value in ("increment", "time") else ("must be 'increment' (the paper's method) or 'time' "
                                                        "(ndebench's extension for CDEs)")


def jump_scale(value: Any) -> str | None:
    return None if value in SCALES else f"must be one of {', '.join(SCALES)}"
