"""Input preparation shared by the time-series models: time channel and torchcde spline coefficients."""
from __future__ import annotations

from typing import Literal

import torch
import torchcde

Interpolation = Literal["hermite", "natural", "linear"]


def with_time_channel(times: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``[t, x]``: prepend the time channel to ``values`` ``(N, L, C)`` -> ``(N, L, C + 1)``."""
    return torch.cat([times.view(1, -1, 1).expand(values.shape[0], -1, 1).to(values.dtype), values], dim=-1)


def spline_coefficients(times: torch.Tensor, path: torch.Tensor, interpolation: Interpolation = "hermite") -> torch.Tensor:
    """torchcde coefficients of ``path`` ``(N, L, C)`` on ``times`` ``(L,)``; NaNs are filled by torchcde.

    ``hermite``: Hermite cubic with backward differences (Kidger's recommended control for online use and
    the SNSDE/NCDE reference pipeline); ``natural``: natural cubic spline; ``linear``: piecewise linear.
    """
    if interpolation == "hermite":
        return torchcde.hermite_cubic_coefficients_with_backward_differences(path, t=times)
    if interpolation == "natural":
        return torchcde.natural_cubic_coeffs(path, t=times)
    if interpolation == "linear":
        return torchcde.linear_interpolation_coeffs(path, t=times)
    raise ValueError(f"unknown interpolation {interpolation!r}; valid: hermite, natural, linear")


def control_path(times: torch.Tensor, coeffs: torch.Tensor, interpolation: Interpolation = "hermite"):
    """The torchcde interpolation object ``X`` built from :func:`spline_coefficients`'s output."""
    if interpolation == "linear":
        return torchcde.LinearInterpolation(coeffs, t=times)
    return torchcde.CubicSpline(coeffs, t=times)
