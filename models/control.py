"""Vector fields that read the value of the control path X(t) (not only its derivative dX/dt)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn


class ReadsControl(nn.Module):
    """``(t, z) -> field(t, z, X(t) - origin)``, binding one batch's control path to a field for one solve.

    ``X`` is a torchcde interpolation ``(B, L, C)``; ``origin`` ``(B, C)`` (default 0) is subtracted, e.g.
    ``X(t0)`` for GRU-ODE whose input tracks ``X(t) - X(t0)``. Beyond the data's last time (STEER's later
    end times) ``X`` is held at ``X(T)`` instead of extrapolating the last spline piece. A new wrapper is
    built per forward pass; it owns no parameters besides the field's.
    """

    def __init__(self, field: nn.Module, X: Any, origin: torch.Tensor | None = None):
        super().__init__()
        self.field, self.X, self.origin = field, X, origin

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x = self.X.evaluate(torch.minimum(t, self.X.interval[-1]))
        return self.field(t, z, x if self.origin is None else x - self.origin)
