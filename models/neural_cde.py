"""Neural CDE (Kidger et al., NeurIPS 2020) with the FinalTanh vector field."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from ndebench.models.base import DataSpec, FieldMLP, Inputs, TimeSeriesNDE
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.registry import register_model
from ndebench.models.static import PathEncoder
from ndebench.models.timeseries import Interpolation
from torch import nn


class FinalTanh(nn.Module):
    """``f(z) = tanh(MLP(z)).view(H, C)``: ``Linear(H,h) -> ReLU -> ... -> Linear(h, H*C)`` then tanh."""

    def __init__(self, input_channels: int, hidden_size: int, hidden_hidden_size: int, num_layers: int, norm=None):
        super().__init__()
        self.input_channels, self.hidden_size = input_channels, hidden_size
        self.net = FieldMLP(hidden_size, hidden_hidden_size, hidden_size * input_channels, num_layers, norm)

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(t, z)).view(*z.shape[:-1], self.hidden_size, self.input_channels)


@register_model(
    "neural_cde",
    display="Neural CDE",
    summary="Neural CDE: dz = f(z) dX(t), X a spline of [t, x]; FinalTanh matrix field",
    paper="Kidger et al., Neural Controlled Differential Equations for Irregular Time Series, NeurIPS 2020",
    family="cde",
)
class NeuralCDE(TimeSeriesNDE):
    """``z(0) = Linear(X(t0))``, ``z(t) = z(0) + int_0^t f(z(s)) dX(s)``, logits = head(z(T)).

    ``X`` interpolates ``[t, x]`` (``C + 1`` channels) with a natural cubic spline by default, as the paper
    states (App. D.2) and Kidger's Speech/Sepsis pipelines do; ``interpolation="hermite"`` (Hermite cubic
    with backward differences) is what torch-ists' UEA runs effectively gave the NCDE (its natural-spline
    list names ``'ncde'``, the model is ``'neuralcde'``). Inputs: coefficients ``(N, L - 1, 4 (C + 1))``,
    or with ``S = data.static_channels`` the tuple ``(coefficients, static (N, S))`` whose MLP is added to
    ``z(0)``; latent ``(B, H)``.
    Continuum Dropout masks rows of the matrix field, i.e. the components of ``f(z) dX/dt``.
    """

    default_solver: ClassVar[SolverConfig] = SolverConfig(method="euler", adjoint=True)
    graph_blocker = None  # the field reads only z; the control path is staged into the graph per batch
    # tests/test_graphs.py's captured-vs-eager cases passed on an NVIDIA H100 (torch 2.11.0+cu130), 2026-11-26
    graph_verified = ("euler", "rk4")

    def __init__(self, data: DataSpec, *, interpolation: Interpolation = "natural", **common: Any):
        super().__init__(data, **common)
        self.encoder = PathEncoder(self.in_channels, self.hidden_size, self.static_channels, interpolation)
        self.field = FinalTanh(self.in_channels + 1, self.hidden_size, self.hidden_size, self.num_layers,
                               self.regularizer.field_layer)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        return self.encoder.prepare(times, values, static)

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        X, z0, final = self.encoder.encode(self.times, inputs)
        return self.solve(self.field, z0, final, rng, control=X)
