"""ANCDE (Jhin et al.): an attention CDE and the main CDE it drives, solved jointly as one augmented CDE."""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from ndebench.models.base import DataSpec, FieldMLP, Inputs, TimeSeriesNDE, split_readout
from ndebench.models.integrate import SolverConfig, TrialRNG
from ndebench.models.neural_cde import FinalTanh
from ndebench.models.registry import register_model
from ndebench.models.static import StaticInput, spline_control, spline_inputs
from ndebench.models.timeseries import Interpolation
from torch import nn


class AttentionField(nn.Module):
    """Bottom CDE field ``f_a(a)`` ``(B, C, C)`` (the reference's ``FinalTanh_ff6``).

    ``Linear(C, h') -> ReLU -> Linear(h', h) -> norm -> ReLU -> (num_layers - 1) x [Linear(h, h) -> norm -> ReLU]
    -> Linear(h, C*C) -> tanh`` with ``h'`` = ``attention_hidden_size`` and ``h`` = ``attention_size``.
    """

    def __init__(self, channels: int, attention_size: int, attention_hidden_size: int, num_layers: int, norm=None):
        super().__init__()
        self.channels = channels
        self.linear_in = nn.Linear(channels, attention_hidden_size)
        self.net = FieldMLP(attention_hidden_size, attention_size, channels * channels, num_layers, norm)

    def forward(self, t: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        out = self.net(t, torch.relu(self.linear_in(a)))
        return torch.tanh(out).view(*a.shape[:-1], self.channels, self.channels)


def _weight_times(layer: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """``W @ y`` ``(B, out, n)`` for a linear layer's weight ``W`` and ``y`` ``(B, in, n)``: the layer's own
    ``weight_times`` where it has one (a stack's layer holds one weight per member's rows), else ``W @ y``."""
    own = getattr(layer, "weight_times", None)
    return own(y) if own is not None else layer.weight @ y


class AugmentedField(nn.Module):
    """Matrix field ``G(t, [a, z])`` ``(B, C + H, C)`` of the joint CDE ``d[a, z] = G dX``.

    With attention ``alpha = sigmoid(s)``, ``s = a`` (channel-wise) or ``s = w . a + b`` (time-wise, one
    value per time), the main CDE is driven by ``Y = X * alpha``:
    ``dY = alpha dX + X * alpha (1 - alpha) ds`` and ``ds = J_s f_a(a) dX``, so
    ``dY = M dX`` with ``M = diag(alpha) + (X * alpha (1 - alpha)) (J_s f_a(a))`` ``(B, C, C)``.
    Hence ``G = [f_a(a); f_z(z) M]``. ``X`` is evaluated from the control at the same ``t``.
    """

    def __init__(self, attention: AttentionField, main: FinalTanh, timewise: nn.Linear | None, X):
        super().__init__()
        self.attention, self.main, self.timewise, self.X = attention, main, timewise, X

    def forward(self, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        channels = self.attention.channels
        a, z = state[..., :channels], state[..., channels:]
        fa = self.attention(t, a)
        if self.timewise is None:
            s, ds = a, fa
        else:
            s, ds = self.timewise(a), _weight_times(self.timewise, fa)
        alpha = torch.sigmoid(s)
        x = self.X.evaluate(torch.minimum(t, self.X.interval[-1]))
        M = torch.diag_embed(alpha.expand_as(x)) + (x * alpha * (1.0 - alpha)).unsqueeze(-1) * ds
        return torch.cat([fa, self.main(t, z) @ M], dim=-2)


@register_model(
    "ancde",
    display="ANCDE",
    summary="Attentive Neural CDE: an attention CDE a(t) gates the path, Y = X * sigmoid(a); dz = f(z) dY",
    paper="Jhin et al., Attentive Neural Controlled Differential Equations for Time-series Classification "
    "and Forecasting, ICDM 2021 / Knowledge and Information Systems 2023",
    family="cde",
)
class ANCDE(TimeSeriesNDE):
    """``a(0) = Linear(X(t0))``, ``z(0) = Linear(X(t0) * alpha(t0)) [+ MLP(static)]``;
    ``[a, z]`` solves one CDE in ``X``.

    ``X`` is the natural cubic spline of ``[t, x]`` (``C`` = channels + 1); ``da = f_a(a) dX`` is the
    attention (bottom) CDE, ``dz = f_z(z) dY`` the main (top) CDE with ``f_z`` the FinalTanh field and
    ``Y = X * sigmoid(s(a))`` (soft attention; ``timewise``: ``s`` = ``Linear(C, 1)(a)``, the reference
    setting). Unlike the reference code there is no file I/O or global step counter: ``dY`` is formed
    analytically from ``da`` at the same ``t`` (see :class:`AugmentedField`), with ``X(t)`` (the
    reference reads ``dX/dt`` there).

    Regularizers act on the main CDE's ``z`` only (``mask_attention=False``, the default: the attention
    CDE is the gate, not the latent dynamics that Continuum Dropout pauses); ``mask_attention=True``
    regularizes the whole ``[a, z]`` state and gives the attention field the regularizer's field layers.
    Inputs: coefficients ``(N, L - 1, 4 C)`` or ``(coefficients, static (N, S))``; latent ``z(T)`` ``(B, H)``.
    Solver default: RK4 on the observation grid, adjoint (the ANCDE repository's defaults).
    """

    default_solver: ClassVar[SolverConfig] = SolverConfig(method="rk4", adjoint=True)

    def __init__(
        self,
        data: DataSpec,
        *,
        attention_size: int = 20,
        attention_hidden_size: int = 10,
        timewise: bool = True,
        mask_attention: bool = False,
        interpolation: Interpolation = "natural",
        **common: Any,
    ):
        super().__init__(data, **common)
        channels, hidden_size, num_layers = self.in_channels + 1, self.hidden_size, self.num_layers
        self.interpolation, self.channels, self.mask_attention = interpolation, channels, mask_attention
        self.attention_initial = nn.Linear(channels, channels)
        self.initial = nn.Linear(channels, hidden_size)
        self.static = StaticInput(self.static_channels, hidden_size)
        attention_norm = self.regularizer.field_layer if mask_attention else None
        self.attention = AttentionField(channels, attention_size, attention_hidden_size, num_layers, attention_norm)
        self.timewise = nn.Linear(channels, 1) if timewise else None
        self.main = FinalTanh(channels, hidden_size, hidden_size, num_layers, self.regularizer.field_layer)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None = None) -> Inputs:
        return spline_inputs(self.static, times, values, static, self.interpolation)

    def latent(self, inputs: Inputs, rng: TrialRNG) -> torch.Tensor:
        inputs, final = split_readout(inputs)
        X, static = spline_control(self.static, self.times, inputs, self.interpolation)
        x0 = X.evaluate(self.times[0])
        a0 = self.attention_initial(x0)
        alpha0 = torch.sigmoid(a0 if self.timewise is None else self.timewise(a0))
        z0 = self.static(self.initial(x0 * alpha0), static)
        field = AugmentedField(self.attention, self.main, self.timewise, X)
        regularized = None if self.mask_attention else slice(self.channels, None)
        state = self.solve(field, torch.cat([a0, z0], dim=-1), final, rng, control=X, regularized=regularized)
        return state[..., self.channels :]
