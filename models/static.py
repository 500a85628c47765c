"""Time-invariant features (e.g. Sepsis demographics) fed into a time-series model's initial state."""
from __future__ import annotations

import torch
from torch import nn

from ndebench.models.base import Inputs


class StaticInput(nn.Module):
    """``z(0) <- z(0) + MLP(s)`` for static features ``s`` ``(B, S)``; nothing when ``static_channels == 0``.

    The MLP is Kidger's Sepsis ``InitialValueNetwork``, ``Linear(S, 256) -> ReLU -> Linear(256, H)``.
    :meth:`pack` appends the statics to a model's prepared inputs (a tuple ``(main, static)``) and
    :meth:`unpack` splits them again, so the statics follow the samples through ``index_batch`` and
    ``repeat_batch``.
    """

    def __init__(self, static_channels: int, hidden_size: int, width: int = 256):
        super().__init__()
        if static_channels < 0:
            raise ValueError(f"static_channels={static_channels} must be >= 0")
        self.static_channels = static_channels
        self.net = (
            nn.Sequential(nn.Linear(static_channels, width), nn.ReLU(), nn.Linear(width, hidden_size))
            if static_channels
            else None
        )

    def pack(self, main: torch.Tensor, static: torch.Tensor | None) -> Inputs:
        """``main`` alone, or ``(main, static)`` when the model takes static features."""
        if self.net is None:
            if static is not None:
                raise ValueError(
                    f"got static features of shape {tuple(static.shape)} but the model was built with "
                    "static_channels=0; pass static_channels=S to create_model"
                )
            return main
        if static is None or static.dim() != 2 or static.shape != (main.shape[0], self.static_channels):
            got = None if static is None else tuple(static.shape)
            raise ValueError(f"expected static features of shape ({main.shape[0]}, {self.static_channels}), got {got}")
        return main, static.to(main.dtype)

    def unpack(self, inputs: Inputs) -> tuple[torch.Tensor, torch.Tensor | None]:
        return (inputs[0], inputs[1]) if isinstance(inputs, tuple) else (inputs, None)

    def forward(self, z0: torch.Tensor, static: torch.Tensor | None) -> torch.Tensor:
        return z0 if self.net is None else z0 + self.net(static)
