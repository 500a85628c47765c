"""Time-invariant features (e.g. Sepsis demographics) fed into a time-series model's initial state."""
from __future__ import annotations

from typing import Any

import torch
from ndebench.models.base import Inputs, split_readout
from ndebench.models.graphs import at_first_knot
from ndebench.models.timeseries import control_path, spline_coefficients, with_time_channel
from torch import nn


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
                    "static_channels=0; give create_model a DataSpec with static_channels=S"
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


def spline_inputs(static_input: StaticInput, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None,
                  interpolation: str) -> Inputs:
    """A split's inputs to a spline-driven model: torchcde coefficients ``(N, L - 1, 4 (C + 1))`` of the time
    channel and the values ``(N, L, C)``, with the static features packed alongside (:meth:`StaticInput.pack`)."""
    return static_input.pack(spline_coefficients(times, with_time_channel(times, values), interpolation), static)


def spline_control(static_input: StaticInput, times: torch.Tensor, inputs: Inputs,
                   interpolation: str) -> tuple[Any, torch.Tensor | None]:
    """The control path ``X`` (a torchcde interpolation) and the static features ``(B, S)`` or ``None`` of a
    batch of :func:`spline_inputs`."""
    coeffs, static = static_input.unpack(inputs)
    return control_path(times, coeffs, interpolation), static


class PathEncoder(nn.Module):
    """Input side of the spline-driven models: ``[t, x]`` -> control path ``X`` and ``z(0)``.

    :meth:`prepare` (once per split) builds :func:`spline_inputs`; :meth:`encode` (per batch) returns the
    interpolation ``X``, ``z(0) = Linear(X(t0)) + MLP(static)`` of shape ``(B, H)`` and each sample's final
    observation index ``(B,)`` (``None`` unless the inputs are :class:`~ndebench.models.base.TimedInputs`).
    """

    def __init__(self, in_channels: int, hidden_size: int, static_channels: int = 0, interpolation: str = "hermite"):
        super().__init__()
        self.interpolation = interpolation
        self.initial = nn.Linear(in_channels + 1, hidden_size)
        self.static = StaticInput(static_channels, hidden_size)

    def prepare(self, times: torch.Tensor, values: torch.Tensor, static: torch.Tensor | None) -> Inputs:
        return spline_inputs(self.static, times, values, static, self.interpolation)

    def encode(self, times: torch.Tensor, inputs: Inputs) -> tuple[Any, torch.Tensor, torch.Tensor | None]:
        inputs, final = split_readout(inputs)
        X, static = spline_control(self.static, times, inputs, self.interpolation)
        return X, self.static(self.initial(at_first_knot(X)), static), final
