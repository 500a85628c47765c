"""TA-BN (Zheng et al. 2024): temporal adaptive batch normalization inside the vector field."""
from __future__ import annotations

from typing import Any

import torch
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.field_layers import FieldLayerRegularizer, needs_field_layers
from ndebench.regularizers.registry import register_regularizer
from torch import nn


def bin_weights(t: torch.Tensor | float, t0: float, t1: float, bins: int) -> tuple[int, float]:
    """Neighbouring nodes of ``t`` and the weight of the upper one, for ``bins`` nodes evenly over ``[t0, t1]``.

    Node ``k`` sits at ``t0 + k (t1 - t0) / (bins - 1)``. Returns ``(k, w)`` such that a per-node quantity
    ``q`` is interpolated as ``(1 - w) q[k] + w q[k + 1]``, with ``w = (t - node_k) / (node_{k+1} - node_k)``:
    the lower node gets the weight of the distance to the *upper* one (the reference repo's second
    ``BatchNorm2dBi`` swaps them). Times outside ``[t0, t1]`` take the end node (``w`` in {0, 1}).
    """
    t = float(t.detach()) if isinstance(t, torch.Tensor) else float(t)
    u = (t - t0) / (t1 - t0) * (bins - 1)
    u = min(max(u, 0.0), bins - 1.0)
    k = min(int(u), bins - 2)
    return k, u - k


class TemporalBatchNorm(nn.Module):
    """``(t, x) -> gamma(t) * (x - mu(t)) / sqrt(var(t) + eps) + beta(t)`` with per-time-node statistics.

    ``x`` is ``(B, C)`` or ``(B, C, *spatial)``; statistics are over every dimension but 1. Nodes ``k = 0..K-1``
    hold learnable ``weight``/``bias`` ``(K, C)`` (init 1 and 0) and buffers ``running_mean``/``running_var``
    ``(K, C)`` (init 0 and 1); ``span`` ``(2,)`` is ``[t0, T]``. With ``(k, w) = bin_weights(t)``, every
    per-node quantity is interpolated between nodes ``k`` and ``k + 1``. Training normalizes with the batch
    statistics (biased variance) and moves the running statistics of the two nodes towards the batch's
    (unbiased variance) with momentum ``momentum * (1 - w)`` and ``momentum * w``; eval mode uses the
    interpolated running statistics. As in the reference, every training evaluation updates the statistics
    (each Runge-Kutta stage, and an adjoint solver's backward re-evaluations too).
    """

    def __init__(self, num_features: int, bins: int, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__()
        self.num_features, self.bins, self.momentum, self.eps = num_features, bins, momentum, eps
        self.weight = nn.Parameter(torch.ones(bins, num_features))
        self.bias = nn.Parameter(torch.zeros(bins, num_features))
        self.register_buffer("running_mean", torch.zeros(bins, num_features))
        self.register_buffer("running_var", torch.ones(bins, num_features))
        self.register_buffer("span", torch.tensor([float("inf"), float("-inf")], dtype=torch.float64))

    def cover(self, t0: float, t1: float) -> None:
        """Widen ``span`` to include ``[t0, t1]``."""
        self.span[0] = min(float(self.span[0]), t0)
        self.span[1] = max(float(self.span[1]), t1)

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        t0, t1 = self.span.tolist()
        if not t0 < t1:
            raise RuntimeError("tabn: the time span is unknown; it is learned from the first training pass")
        k, w = bin_weights(t, t0, t1, self.bins)
        dims = [d for d in range(x.dim()) if d != 1]
        shape = (1, -1) + (1,) * (x.dim() - 2)
        if self.training:
            mean, var = x.mean(dims), x.var(dims, unbiased=False)
            with torch.no_grad():
                n = x.numel() // x.shape[1]
                unbiased = var * n / max(n - 1, 1)
                for node, share in ((k, 1.0 - w), (k + 1, w)):
                    rate = self.momentum * share
                    self.running_mean[node].lerp_(mean.to(self.running_mean.dtype), rate)
                    self.running_var[node].lerp_(unbiased.to(self.running_var.dtype), rate)
        else:
            mean = torch.lerp(self.running_mean[k], self.running_mean[k + 1], w)
            var = torch.lerp(self.running_var[k], self.running_var[k + 1], w)
        gamma = torch.lerp(self.weight[k], self.weight[k + 1], w)
        beta = torch.lerp(self.bias[k], self.bias[k + 1], w)
        x_hat = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        return x_hat * gamma.view(shape) + beta.view(shape)


@register_regularizer(
    "tabn",
    display="TA-BN",
    summary="TA-BN: batch norm inside the vector field with per-time-node statistics and affine parameters",
    hyperparams=BUILTINS["tabn"].hyperparams,
    incompatible=needs_field_layers("TA-BN"),
)
class TABN(FieldLayerRegularizer):
    """Temporal adaptive batch normalization (``shelljane/tabn-neuralode``, ``ntype='bilinear'``).

    A :class:`TemporalBatchNorm` follows every hidden linear layer of the vector-field MLP, before the
    activation (``field_layer`` hook), as in the reference's ``Conv2d4NODE``. ``K = bins`` nodes are spread
    evenly over ``[t0, T]`` (the reference assumes ``[0, 1)``); the span is learned, not assumed: each
    training pass widens every layer's ``span`` buffer to cover the pass's interval, so after the first
    pass it is the data's ``[t0, T]``, and it is saved in ``state_dict`` with the statistics. Deterministic:
    no randomness, but the layers act in eval mode too (with the running statistics). ``penalty()`` is the
    reference's ``bndecay``: ``decay * sum over layers and nodes k of MSE(gamma_k, 1) + MSE(beta_k, 0)``.
    Deviations from the reference code: the interpolation and running-statistic update weights are the
    correct ones, statistics are registered buffers, and the first hit of a node is not skipped.
    """

    label = "tabn"

    def __init__(self, bins: int = 100, decay: float = 0.1):
        super().__init__()
        self.bins, self.decay = int(bins), float(decay)

    def make_layer(self, num_features: int) -> nn.Module:
        return TemporalBatchNorm(num_features, self.bins)

    def draw(self, spec: PassSpec) -> None:
        for layer in self.layers:
            layer.cover(spec.t0, spec.t1)
        return None

    def penalty(self) -> torch.Tensor:
        if self.decay == 0.0 or not self._layers:
            return torch.zeros(())
        total = sum(
            ((layer.weight - 1.0) ** 2).mean(-1).sum() + (layer.bias**2).mean(-1).sum() for layer in self._layers
        )
        return self.decay * total

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "bins": self.bins, "decay": self.decay}
