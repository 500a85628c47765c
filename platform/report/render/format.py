"""How the report writes a number: a value, a p-value, an interval (:data:`DIGITS` decimals by default)."""
from __future__ import annotations

import math

DIGITS = 3


def fmt(x: float, digits: int = DIGITS, sign: bool = False) -> str:
    """``x`` with ``digits`` decimals (``sign``: always signed); ``n/a`` for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def fmt_p(p: float) -> str:
    """A p-value: 4 decimals, scientific below 1e-4, ``n/a`` for None or NaN."""
    if p is None or math.isnan(p):
        return "n/a"
    return f"{p:.2e}" if p < 1e-4 else f"{p:.4f}"


def interval(low: float, high: float, digits: int = DIGITS) -> str:
    """``[low, high]`` with signs, or ``""`` when the interval is undefined."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f"[{fmt(low, digits, True)}, {fmt(high, digits, True)}]"
