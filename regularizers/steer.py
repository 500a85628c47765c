"""STEER (Ghosh et al. 2020): a random end time per training pass."""
from __future__ import annotations

from typing import Any

import torch
from ndebench.regularizers.base import PassSpec, Regularizer
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.registry import register_regularizer


@register_regularizer(
    "steer",
    display="STEER",
    summary="STEER: integrate to T' ~ U(T - b, T + b) per training pass (b a fraction of T - t0); fixed T at test",
    hyperparams=BUILTINS["steer"].hyperparams,
)
class Steer(Regularizer):
    """``z(T') = z(t0) + int_{t0}^{T'} f dt`` with one ``T' ~ U(T - b_abs, T + b_abs)`` per forward pass.

    ``b`` is given as a fraction of the horizon, ``b_abs = b (T - t0)``, so one search space serves datasets
    whose time axes differ (``[0, 1]``, ``[0, 160]``, ...) and ``0 < b < 1`` is the paper's constraint
    ``b_abs < T - t0``. As in ``arnabgho/steer`` (``odeint_stochastic_end_v3``) the end time is one scalar
    shared by the batch and redrawn every pass, from the trial's regularizer generator; in eval mode the
    model integrates to the fixed ``T``. ``integrate`` keeps the step grid up to ``T'`` and, past ``T``,
    holds a CDE's control at ``X(T)`` (``dX = 0``, no invented data), so for CDEs ``T' > T`` leaves ``z(T)``
    unchanged while ``T' < T`` truncates the series; ODE-type fields keep evolving past ``T``.
    """

    stochastic = True
    stack_blocker = "each member's pass ends at its own drawn time T', and a stacked solve has one time grid"

    def __init__(self, b: float = 0.5):
        super().__init__()
        self.b = float(b)

    def draw(self, spec: PassSpec) -> float:
        u = float(torch.rand((), generator=spec.generator, device=spec.generator.device, dtype=torch.float64))
        half_width = self.b * (spec.t1 - spec.t0)
        return spec.t1 + half_width * (2.0 * u - 1.0)

    def end_time(self, draw: float, t0: float, t1: float) -> float:
        return draw

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "b": self.b, "b_units": "fraction of T - t0"}
