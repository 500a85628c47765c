"""Neural SDEs for time series with the drift and diffusion forms of Oh et al. (ICLR 2024).

The reference pipeline (``Stable-Neural-SDEs``, ``Diffusion_model``) names a model by an input option
(what the drift sees) and a noise option (the diffusion's form): the naive Neural SDE is ``3_18``, Neural
LSDE ``2_16``, Neural LNSDE ``4_17`` and Neural GSDE ``6_17``. The ``sin/cos(t)`` features and the ``tanh``
bounds are the pipeline's stabilizers and are kept.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from ndebench.models.base import DataSpec, FieldMLP, Inputs, TimeSeriesNDE
from ndebench.models.control import ReadsControl
from ndebench.models.integrate import TrialRNG
from ndebench.models.registry import register_model
from ndebench.models.static import PathEncoder
from ndebench.models.timeseries import Interpolation
from torch import nn

OH_2024 = ("Oh, Lim and Kim, Stable Neural Stochastic Differential Equations in Analyzing Irregular Time Series Data, "
           "ICLR 2024")


def time_features(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[sin t, cos t]`` repeated over the batch of ``like`` ``(B, .)``: ``(B, 2)``."""
    t = t.to(like.dtype).reshape(1, 1).expand(like.shape[0], 1)
    return torch.cat([torch.sin(t), torch.cos(t)], dim=-1)


class SNSDEDrift(nn.Module):
    """``f(t, y) = tanh(h(t, y, X(t)) [* tanh(y)])`` for latent ``y`` ``(B, H)`` and control value ``X(t)`` ``(B, C)``.

    * ``time_features``: the latent branch sees ``[sin t, cos t, y]`` (input options 3-6), else ``y``;
    * ``control``: ``h = MLP([Linear(latent branch), Linear(X(t))])`` (options 2/4/6), else ``h = MLP(latent
      branch)`` (options 1/3/5, the data enter through ``z(0)`` only);
    * ``geometric``: ``h`` is multiplied by ``tanh(y)`` before the outer ``tanh`` (options 5/6, GSDE).

    MLP: ``num_layers`` x [Linear -> norm -> ReLU] -> Linear(H, H), as the reference's ``emb``/``linear_in``
    followed by ``linears`` and ``linear_out``.
    """

    def __init__(
        self, input_channels: int, hidden_size: int, num_layers: int, *, time_features: bool, control: bool,
        geometric: bool, norm=None,
    ):
        super().__init__()
        self.time_features, self.control, self.geometric = time_features, control, geometric
        latent_in = hidden_size + 2 if time_features else hidden_size
        if control:
            self.latent_in = nn.Linear(latent_in, hidden_size)
            self.control_in = nn.Linear(input_channels, hidden_size)
            latent_in = 2 * hidden_size
        self.net = FieldMLP(latent_in, hidden_size, hidden_size, num_layers, norm)

    def forward(self, t: torch.Tensor, y: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        features = torch.cat([time_features(t, y), y], dim=-1) if self.time_features else y
        if self.control:
            features = torch.cat([self.latent_in(features), self.control_in(x)], dim=-1)
        out = self.net(t, features)
        if self.geometric:
            out = out * torch.tanh(y)
        return torch.tanh(out)


class SNSDEDiffusion(nn.Module):
    """Diagonal ``g(t, y) = tanh(sigmoid(theta) * relu(MLP(features)) [* y])`` ``(B, H)``, bounded in (-1, 1).

    ``features`` are ``[sin t, cos t]`` (noise options 16/17, time only) or ``[sin t, cos t, y]`` (option
    18); ``multiplicative`` multiplies by ``y`` (option 17). MLP: ``Linear(in, H) -> ReLU -> Linear(H, H)``;
    ``theta`` is a learned scalar initialized at 1.
    """

    def __init__(self, hidden_size: int, *, state_input: bool, multiplicative: bool, theta: float = 1.0):
        super().__init__()
        self.state_input, self.multiplicative = state_input, multiplicative
        in_size = 2 + (hidden_size if state_input else 0)
        self.net = nn.Sequential(nn.Linear(in_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, hidden_size))
        self.theta = nn.Parameter(torch.tensor(float(theta)))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        features = time_features(t, y)
        if self.state_input:
            features = torch.cat([features, y], dim=-1)
        g = torch.relu(self.net(features))
        if self.multiplicative:
            g = g * y
        # theta per row, (B, 1): its gradient then sums as a stack of trials sums each member's (StackedScalars)
        return torch.tanh(torch.sigmoid(self.theta.expand(g.shape[0], 1)) * torch.nan_to_num(g))


def snsde_readout(hidden_size: int) -> nn.Sequential:
    """The SDE layer's own output map, ``Tanh -> Linear(H, H) -> ReLU -> Linear(H, H)``, before the classifier."""
    return nn.Sequential(nn.Tanh(), nn.Linear(hidden_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, hidden_size))


class SNSDEClassifier(TimeSeriesNDE):
    """``z(0) = Linear(X(t0)) [+ MLP(static)]``, ``dz = f(t, z) dt + g(t, z) dW`` (Ito, diagonal), logits = head(z(T)).

    ``X`` is the Hermite cubic spline (backward differences) of ``[t, x]`` (``C + 1`` channels), as in the
    reference pipeline. Inputs: coefficients ``(N, L - 1, 4 (C + 1))``, or with static features ``S`` the
    tuple ``(coefficients, static (N, S))``; latent ``(B, H)``. The head is the reference's readout
    followed by the classifier head. Solved with torchsde Euler-Maruyama on the observation grid
    (``dt = min spacing``), no adjoint. Continuum Dropout pauses drift and diffusion together.
    Subclasses set ``drift_form`` and ``diffusion_form``.
    """

    drift_form: ClassVar[dict[str, bool]]
    diffusion_form: ClassVar[dict[str, bool]]
    graph_blocker: ClassVar[str | None] = "its drift reads the control path X(t) inside the field (not staged)"

    def __init__(self, data: DataSpec, *, interpolation: Interpolation = "hermite", **common: Any):
        super().__init__(data, **common)
        hidden_size = self.hidden_size
        self.encoder = PathEncoder(self.in_channels, hidden_size, self.static_channels, interpolation)
        self.drift = SNSDEDrift(self.in_channels + 1, hidden_size, self.num_layers, norm=self.regularizer.field_layer,
                                **self.drift_form)
        self.diffusion = SNSDEDiffusion(hidden_size, **self.diffusion_form)
        self.head = nn.Sequential(snsde_readout(hidden_size), self.head)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        return self.encoder.prepare(times, values, static)

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        X, z0, final = self.encoder.encode(self.times, inputs)
        drift = ReadsControl(self.drift, X) if self.drift.control else self.drift
        return self.solve(drift, z0, final, rng, diffusion=self.diffusion)


@register_model(
    "neural_sde",
    display="Neural SDE",
    summary="Naive Neural SDE: dz = tanh(MLP(sin t, cos t, z)) dt + g(t, z) dW; data enter through z(0) only",
    paper="Tzen & Raginsky, Neural Stochastic Differential Equations, arXiv 1905.09883 (2019); forms of " + OH_2024,
    family="sde",
)
class NeuralSDE(SNSDEClassifier):
    """Input option 3 (latent and time, no control), noise option 18 (``g`` an MLP of ``sin t, cos t, z``)."""

    drift_form = dict(time_features=True, control=False, geometric=False)
    diffusion_form = dict(state_input=True, multiplicative=False)
    graph_blocker = None
    # Captured against the exact Euler-Maruyama law (tests/test_graphs.py, OU mean and variance) on an NVIDIA H100
    # (torch 2.11.0+cu130), 2026-11-26: a captured SDE draws its own increments, so it matches eager in law only.
    graph_verified = ("euler",)


@register_model(
    "neural_lsde",
    display="Neural LSDE",
    summary="Neural LSDE (Langevin-type): dz = f(z, X(t)) dt + sigma(t) dW, additive time-only noise",
    paper=OH_2024,
    family="sde",
)
class NeuralLSDE(SNSDEClassifier):
    """Input option 2 (latent and control, no time features), noise option 16 (``g = sigma(t)``)."""

    drift_form = dict(time_features=False, control=True, geometric=False)
    diffusion_form = dict(state_input=False, multiplicative=False)


@register_model(
    "neural_lnsde",
    display="Neural LNSDE",
    summary="Neural LNSDE (linear noise): dz = f(t, z, X(t)) dt + sigma(t) z dW",
    paper=OH_2024,
    family="sde",
)
class NeuralLNSDE(SNSDEClassifier):
    """Input option 4 (latent, time and control), noise option 17 (``g = sigma(t) z``)."""

    drift_form = dict(time_features=True, control=True, geometric=False)
    diffusion_form = dict(state_input=False, multiplicative=True)


@register_model(
    "neural_gsde",
    display="Neural GSDE",
    summary="Neural GSDE (geometric): dz = tanh(h(t, z, X(t)) * tanh(z)) dt + sigma(t) z dW",
    paper=OH_2024,
    family="sde",
)
class NeuralGSDE(SNSDEClassifier):
    """Input option 6 (latent, time and control, geometric factor ``tanh(z)``), noise option 17."""

    drift_form = dict(time_features=True, control=True, geometric=True)
    diffusion_form = dict(state_input=False, multiplicative=True)
