"""Exact map from Continuum Dropout's (p, m, T) to the renewal rates (lambda1, lambda2) (paper Corollary 3.2)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from scipy.optimize import brentq


@dataclass(frozen=True)
class Rates:
    """Rates of the exponential active (``lambda1``) and inactive (``lambda2``) periods."""

    lambda1: float
    lambda2: float


def _check(p: float, m: float, T: float) -> None:
    if not (0.0 < p < 1.0) or math.isnan(p):
        raise ValueError(f"dropout rate p={p!r} must lie in the open interval (0, 1)")
    if not m > 0.0 or math.isinf(m):
        raise ValueError(f"expected number of renewals m={m!r} must be a finite number > 0")
    if not T > 0.0 or math.isinf(T):
        raise ValueError(f"time horizon T={T!r} must be a finite number > 0")


def dropout_rate(lambda1: float, lambda2: float, T: float) -> float:
    """``p = lambda1/(lambda1+lambda2) * (1 - exp(-(lambda1+lambda2) T))`` (Theorem 3.1)."""
    s = lambda1 + lambda2
    return lambda1 / s * -math.expm1(-s * T)


def expected_renewals(lambda1: float, lambda2: float, T: float) -> float:
    """``m = l1 l2/(l1+l2) T - l1 l2/(l1+l2)^2 (1 - exp(-(l1+l2) T))`` (Corollary 3.2)."""
    s = lambda1 + lambda2
    return lambda1 * lambda2 / s * T - lambda1 * lambda2 / s**2 * -math.expm1(-s * T)


def expected_active_time(lambda1: float, lambda2: float, T: float) -> float:
    """``E[int_0^T I(t) dt] = l2/(l1+l2) T + l1/(l1+l2)^2 (1 - exp(-(l1+l2) T))`` for a process starting active."""
    s = lambda1 + lambda2
    return lambda2 / s * T + lambda1 / s**2 * -math.expm1(-s * T)


@functools.lru_cache(maxsize=256)
def solve_rates(p: float, m: float, T: float = 1.0, *, rtol: float = 1e-9) -> Rates:
    """Solve Corollary 3.2 exactly for ``(lambda1, lambda2)``.

    With ``x = (lambda1 + lambda2) T`` and ``a = lambda1 / (lambda1 + lambda2)`` the system reads
    ``p = a (1 - e^{-x})`` and ``m = a (1 - a) (x - 1 + e^{-x})``. The first equation gives
    ``a(x) = p / (1 - e^{-x})``, which is a valid share (< 1) for ``x > -ln(1 - p)``; on that half-line
    ``g(x) = a(1-a)(x - 1 + e^{-x}) - m`` runs from ``-m`` to ``+inf``, so a bracketing root finder
    (scipy's ``brentq``) finds the root. The residuals of both equations are checked against ``rtol``.

    Raises ``ValueError`` for ``p`` outside (0, 1), ``m <= 0`` or ``T <= 0``. Results are cached: Continuum
    Dropout asks for the same rates on every forward pass.
    """
    _check(p, m, T)

    def share(x: float) -> float:
        return p / -math.expm1(-x)

    def g(x: float) -> float:
        a = share(x)
        return a * (1.0 - a) * (x - 1.0 + math.exp(-x)) - m

    lo = -math.log1p(-p)
    lo = math.nextafter(lo, math.inf)
    while share(lo) >= 1.0:
        lo = lo * (1 + 1e-12) + 1e-300
    hi = max(2.0 * lo, 1.0)
    while g(hi) <= 0.0:
        hi *= 2.0
    x = brentq(g, lo, hi, xtol=1e-300, rtol=1e-15, maxiter=500)
    a = share(x)
    rates = Rates(lambda1=a * x / T, lambda2=(1.0 - a) * x / T)
    p_err = abs(dropout_rate(rates.lambda1, rates.lambda2, T) - p) / p
    m_err = abs(expected_renewals(rates.lambda1, rates.lambda2, T) - m) / m
    if p_err > rtol or m_err > rtol:
        raise ArithmeticError(
            f"rate solver did not converge for p={p}, m={m}, T={T}: relative residuals {p_err:.2e}, {m_err:.2e}"
        )
    return rates


def asymptotic_rates(p: float, m: float, T: float = 1.0) -> Rates:
    """Large-T approximation of Corollary 3.2: ``lambda1 ~ m/((1-p) T)``, ``lambda2 ~ m/(p T)``."""
    _check(p, m, T)
    return Rates(lambda1=m / ((1.0 - p) * T), lambda2=m / (p * T))
