"""Naive dropout inside the vector-field network, one Bernoulli mask per forward pass."""
from __future__ import annotations

from typing import Any

import torch
from ndebench.regularizers.base import PassSpec
from ndebench.regularizers.catalog import BUILTINS
from ndebench.regularizers.field_layers import FieldLayerRegularizer, needs_field_layers
from ndebench.regularizers.registry import register_regularizer
from torch import nn


class UnitDropout(nn.Module):
    """``(t, x) -> x * mask / (1 - p)``, the mask of the current pass; the identity in eval mode.

    ``x`` is ``(B, C)`` or ``(B, C, *spatial)``; the mask is ``(B, C)`` (for feature maps a whole channel
    is dropped). The mask is set by :meth:`NaiveDropoutDrift.draw`, never drawn here, so every evaluation
    of the field in a pass (all steps, Runge-Kutta stages, adjoint re-evaluations) sees the same one.
    """

    def __init__(self, num_features: int):
        super().__init__()
        self.num_features = num_features
        self.mask: torch.Tensor | None = None

    def forward(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        if self.mask is None or self.mask.shape[0] != x.shape[0]:
            drawn = None if self.mask is None else tuple(self.mask.shape)
            raise RuntimeError(
                f"naive_dropout_drift: no mask drawn for a batch of {x.shape[0]} (drawn: {drawn}); the field "
                "must be evaluated through integrate(), which draws the masks of each pass"
            )
        return x * self.mask.view(*self.mask.shape, *([1] * (x.dim() - 2))).to(x.dtype)


@register_regularizer(
    "naive_dropout_drift",
    display="Naive Dropout (drift)",
    summary="Standard dropout on the vector-field MLP's hidden units, one mask per forward pass; off at test",
    hyperparams=BUILTINS["naive_dropout_drift"].hyperparams,
    incompatible=needs_field_layers("drift dropout"),
)
class NaiveDropoutDrift(FieldLayerRegularizer):
    """Dropout (Srivastava et al. 2014) on the hidden units of the drift / vector-field MLP.

    Each hidden layer of the field is ``act(m * (W x + b) / (1 - p))`` with ``m ~ Bernoulli(1 - p)`` per
    (sample, unit), shape ``(B, num_features)``. The masks of all layers are drawn once per forward pass
    (``begin_pass``, also when a model solves a pass piecewise) from the trial's regularizer generator and
    held fixed for every evaluation of the field in that pass: a mask redrawn per evaluation would make
    the Runge-Kutta stages and the adjoint backward pass see different functions. Inverted scaling keeps
    ``E[layer output]`` unchanged, so the eval-mode network is the plain one (deterministic test
    protocol). The units live in the models' ``FieldMLP`` (``field_layer`` hook), after each hidden linear
    layer and before its activation.
    """

    stochastic = True
    label = "naive_dropout_drift"

    def __init__(self, p: float = 0.3):
        super().__init__()
        self.p = float(p)

    def make_layer(self, num_features: int) -> nn.Module:
        return UnitDropout(num_features)

    def draw(self, spec: PassSpec) -> list[torch.Tensor]:
        masks = []
        for layer in self.layers:
            u = torch.rand(spec.batch_size, layer.num_features, generator=spec.generator, device=spec.generator.device)
            keep = u >= self.p
            layer.mask = (keep.to(spec.dtype) / (1.0 - self.p)).to(spec.device)
            masks.append(layer.mask)
        return masks

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "p": self.p}
