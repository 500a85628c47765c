"""Neural ODE classifier for time series (Chen et al. 2018): the data enter through z(0) only."""
from __future__ import annotations

from typing import Any

import torch
from ndebench.models.base import DataSpec, FieldMLP, Inputs, TimeSeriesNDE
from ndebench.models.integrate import TrialRNG
from ndebench.models.registry import register_model
from ndebench.models.snsde import snsde_readout
from ndebench.models.static import PathEncoder
from torch import nn


class TimeDrift(nn.Module):
    """``f(t, z) = tanh(MLP([sin t, cos t, z]))``: the SNSDE drift with input option 3 (latent and time only)."""

    def __init__(self, hidden_size: int, num_layers: int, norm=None):
        super().__init__()
        self.net = FieldMLP(hidden_size + 2, hidden_size, hidden_size, num_layers, norm)

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        features = torch.cat([torch.sin(t).expand(z.shape[0], 1), torch.cos(t).expand(z.shape[0], 1), z], dim=-1)
        return torch.tanh(self.net(t, features))


@register_model(
    "neural_ode",
    display="Neural ODE",
    summary="Neural ODE: z(0) = Linear(x(t0)), dz = tanh(MLP(sin t, cos t, z)) dt; data enter through z(0) only",
    paper="Chen et al., Neural Ordinary Differential Equations, NeurIPS 2018",
    family="ode",
)
class NeuralODE(TimeSeriesNDE):
    """``z(0) = Linear([t0, x(t0)])``, ``dz/dt = f(t, z)``, logits = head(z(T)).

    As in the SNSDE pipeline's zero-diffusion model with input option 3, the series enters through the
    initial state only (the Hermite spline fills missing initial values), and the head starts with that
    pipeline's readout (as for the Neural SDEs). Inputs: spline coefficients ``(N, L - 1, 4 (C + 1))``, or
    with ``S = data.static_channels`` the tuple ``(coefficients, static (N, S))`` whose MLP is added to
    ``z(0)``; latent ``(B, H)``.
    """

    graph_blocker = None
    # tests/test_graphs.py's captured-vs-eager cases passed on an NVIDIA H100 (torch 2.11.0+cu130), 2026-11-26
    graph_verified = ("euler", "rk4")

    def __init__(self, data: DataSpec, **common: Any):
        super().__init__(data, **common)
        self.encoder = PathEncoder(self.in_channels, self.hidden_size, self.static_channels)
        self.field = TimeDrift(self.hidden_size, self.num_layers, self.regularizer.field_layer)
        self.head = nn.Sequential(snsde_readout(self.hidden_size), self.head)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        return self.encoder.prepare(times, values, static)

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        _, z0, final = self.encoder.encode(self.times, inputs)
        return self.solve(self.field, z0, final, rng)
