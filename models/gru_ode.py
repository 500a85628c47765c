"""GRU-ODE (De Brouwer et al., NeurIPS 2019) as a time-series classifier, following Kidger's GRU-ODE baseline."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from ndebench.models.base import DataSpec, Inputs, TimeSeriesNDE, split_readout
from ndebench.models.control import ReadsControl
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.registry import register_model
from ndebench.models.static import StaticInput, spline_control, spline_inputs
from ndebench.models.timeseries import Interpolation
from torch import nn


class GRUODEField(nn.Module):
    """``dh/dt = (1 - u) * (g - h)`` with the GRU gates computed from the input ``x`` ``(B, C)`` and ``h`` ``(B, H)``.

    ``r = sigmoid(W_r x + U_r h)``, ``u = sigmoid(W_u x + U_u h)``, ``g = tanh(W_g x + U_g (r * h))``; the
    ``W`` have no bias. As in Kidger's ``ContinuousRNNConverter``, ``h`` is clamped to [-1, 1] inside the field.
    """

    def __init__(self, input_channels: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.W = nn.Linear(input_channels, 3 * hidden_size, bias=False)
        self.U_ru = nn.Linear(hidden_size, 2 * hidden_size)
        self.U_g = nn.Linear(hidden_size, hidden_size)

    def forward(self, t: torch.Tensor, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = h.clamp(-1.0, 1.0)
        wx_r, wx_u, wx_g = self.W(x).split(self.hidden_size, dim=-1)
        uh_r, uh_u = self.U_ru(h).split(self.hidden_size, dim=-1)
        r = torch.sigmoid(wx_r + uh_r)
        u = torch.sigmoid(wx_u + uh_u)
        g = torch.tanh(wx_g + self.U_g(r * h))
        return (1.0 - u) * (g - h)


@register_model(
    "gru_ode",
    display="GRU-ODE",
    summary="GRU-ODE: dh/dt = (1 - u)(g - h), GRU gates driven by the spline X(t) of [t, x]",
    paper="De Brouwer et al., GRU-ODE-Bayes: Continuous Modeling of Sporadically-Observed Time Series, NeurIPS 2019",
    family="ode",
    field_layers=False,
)
class GRUODE(TimeSeriesNDE):
    """``h(0) = 0 [+ MLP(static)]``, ``dh/dt = GRUODEField(X(t) - X(t0), h)``, logits = head(h(T)).

    Kidger's baseline solves this as a CDE on ``[x, h]`` whose ``x`` block copies ``X(t) - X(t0)`` and whose
    ``h`` block is driven by the time channel only (``dX_time/dt = 1``); here it is the equivalent ODE on
    ``h`` alone, reading ``X(t)`` from the natural cubic spline of ``[t, x]`` (``C + 1`` channels), so the
    latent dynamics and the regularized state are exactly ``h``. With ``intensity=True`` the cumulative
    observation count of each channel is appended to the path (off by default, as in the pipeline).

    Inputs: spline coefficients ``(N, L - 1, 4 C')``, or ``(coefficients, static (N, S))``; latent ``(B, H)``.
    Solver default: RK4 with step = observation spacing, adjoint (Kidger's ``cdeint`` defaults). The
    field has no hidden layers, so ``num_layers`` must be 1 and field-layer regularizers (TA-BN, naive
    drift dropout) have nothing to act on.
    """

    default_solver: ClassVar[SolverConfig] = SolverConfig(method="rk4", adjoint=True)

    def __init__(
        self, data: DataSpec, *, interpolation: Interpolation = "natural", intensity: bool = False, **common: Any
    ):
        super().__init__(data, **common)
        if self.num_layers != 1:
            raise ValueError(f"gru_ode: num_layers={self.num_layers}; the GRU-ODE field has no hidden layers, "
                             "use num_layers=1")
        self.interpolation, self.intensity = interpolation, intensity
        channels = 1 + self.in_channels * (2 if intensity else 1)
        self.static = StaticInput(self.static_channels, self.hidden_size)
        self.field = GRUODEField(channels, self.hidden_size)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        if self.intensity:
            values = torch.cat([(~torch.isnan(values)).cumsum(1).to(values.dtype), values], dim=-1)
        return spline_inputs(self.static, times, values, static, self.interpolation)

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        inputs, final = split_readout(inputs)
        X, static = spline_control(self.static, self.times, inputs, self.interpolation)
        x0 = X.evaluate(self.times[0])
        h0 = self.static(x0.new_zeros(x0.shape[0], self.hidden_size), static)
        return self.solve(ReadsControl(self.field, X, origin=x0), h0, final, rng)
