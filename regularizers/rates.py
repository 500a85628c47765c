"""Exact map from Continuum Dropout's (p, m, T) to the renewal rates (lambda1, lambda2) (paper Corollary 3.2).

Accepted range (:data:`~ndebench.regularizers.checks.P_RANGE`, :data:`~ndebench.regularizers.checks.M_RANGE`):
``1e-6 <= p <= 1 - 1e-6`` and ``1e-6 <= m <= 1e6``, any finite ``T > 0`` whose rates are finite.
:func:`solve_rates` is tested to solve both equations to ``rtol`` on the whole of it; anything outside is
refused with ``ValueError`` before the solver runs.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ndebench.regularizers.checks import check_m, check_p
from scipy.optimize import brentq


@dataclass(frozen=True)
class Rates:
    """Rates of the exponential active (``lambda1``) and inactive (``lambda2``) periods."""

    lambda1: float
    lambda2: float


def _check(p: float, m: float, T: float) -> None:
    for name, value, check in (("dropout rate p", p, check_p), ("expected number of renewals m", m, check_m)):
        problem = check(value)
        if problem:
            raise ValueError(f"{name}={value!r} {problem}")
    if not (isinstance(T, (int, float)) and T > 0.0 and math.isfinite(T)):
        raise ValueError(f"time horizon T={T!r} must be a finite number > 0")


def _phi(x: float) -> float:
    """``x - 1 + e^{-x}`` without cancellation (its Taylor series ``x^2/2 - x^3/6 + ...`` for small ``x``)."""
    if x < 0.1:
        return math.fsum((-x) ** k / math.factorial(k) for k in range(2, 20))
    return x + math.expm1(-x)


def dropout_rate(lambda1: float, lambda2: float, T: float) -> float:
    """``p = lambda1/(lambda1+lambda2) * (1 - exp(-(lambda1+lambda2) T))`` (Theorem 3.1)."""
    s = lambda1 + lambda2
    return lambda1 / s * -math.expm1(-s * T)


def expected_renewals(lambda1: float, lambda2: float, T: float) -> float:
    """``m = l1 l2/(l1+l2) T - l1 l2/(l1+l2)^2 (1 - exp(-(l1+l2) T))`` (Corollary 3.2)."""
    s = lambda1 + lambda2
    return lambda1 / s * (lambda2 / s) * _phi(s * T)


def expected_active_time(lambda1: float, lambda2: float, T: float) -> float:
    """``E[int_0^T I(t) dt] = l2/(l1+l2) T + l1/(l1+l2)^2 (1 - exp(-(l1+l2) T))`` for a process starting active."""
    s = lambda1 + lambda2
    return lambda2 / s * T + lambda1 / s / s * -math.expm1(-s * T)


@functools.lru_cache(maxsize=256)
def solve_rates(p: float, m: float, T: float = 1.0, *, rtol: float = 1e-9) -> Rates:
    """Solve Corollary 3.2 exactly for ``(lambda1, lambda2)``.

    With ``x = (lambda1 + lambda2) T`` and ``a = lambda1 / (lambda1 + lambda2)`` the system reads
    ``p = a (1 - e^{-x})`` and ``m = a (1 - a) phi(x)``, ``phi(x) = x - 1 + e^{-x}``. The first equation gives
    ``a(x) = p / (1 - e^{-x})``, a valid share (< 1) for ``x > x0 = -ln(1 - p)``. Writing ``x = x0 + u``,
    ``1 - a = (1 - p)(1 - e^{-u}) / (1 - e^{-x})`` holds exactly, so no difference of nearly equal numbers is
    formed even for tiny ``m`` (where ``a`` is close to 1). On ``u > 0``, ``g(u) = a (1 - a) phi(x) - m`` runs
    from ``-m`` to ``+inf``; a bracketing root finder (scipy's ``brentq``) finds the root and the residuals of
    both equations are checked against ``rtol``.

    Accepts ``p`` in :data:`~ndebench.regularizers.checks.P_RANGE`, ``m`` in
    :data:`~ndebench.regularizers.checks.M_RANGE` and a finite ``T > 0`` (``ValueError``
    otherwise, also when ``T`` is so extreme that the rates over- or underflow). The residuals are checked on
    the dimensionless system, which does not depend on ``T``. Results are cached: Continuum Dropout asks
    for the same rates on every forward pass.
    """
    _check(p, m, T)
    x0 = -math.log1p(-p)

    def shares(u: float) -> tuple[float, float]:
        total = -math.expm1(-(x0 + u))
        return p / total, (1.0 - p) * -math.expm1(-u) / total

    def g(u: float) -> float:
        a, b = shares(u)
        return a * b * _phi(x0 + u) - m

    hi = 1.0
    while g(hi) <= 0.0:
        hi *= 2.0
    u = brentq(g, 0.0, hi, xtol=1e-300, rtol=1e-15, maxiter=500)
    a, b = shares(u)
    x = x0 + u
    p_err = abs(a * -math.expm1(-x) - p) / p
    m_err = abs(a * b * _phi(x) - m) / m
    if p_err > rtol or m_err > rtol:
        raise ArithmeticError(
            f"rate solver did not converge for p={p}, m={m}, T={T}: relative residuals {p_err:.2e}, {m_err:.2e}"
        )
    rates = Rates(lambda1=a * x / T, lambda2=b * x / T)
    if not all(0.0 < rate < math.inf for rate in (rates.lambda1, rates.lambda2)):
        raise ValueError(f"time horizon T={T!r} is out of range: the rates for p={p}, m={m} over- or underflow")
    return rates


def asymptotic_rates(p: float, m: float, T: float = 1.0) -> Rates:
    """Large-T approximation of Corollary 3.2: ``lambda1 ~ m/((1-p) T)``, ``lambda2 ~ m/(p T)``."""
    _check(p, m, T)
    return Rates(lambda1=m / ((1.0 - p) * T), lambda2=m / (p * T))
