"""Input preparation shared by the time-series models: time channel and torchcde spline coefficients."""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Literal

import torch
import torchcde
from ndebench.datasets.cache import cache_path, cached

Interpolation = Literal["hermite", "natural", "linear"]

_KEPT_IN: ContextVar[Path | None] = ContextVar("natural_splines_kept_in", default=None)


@contextlib.contextmanager
def natural_splines_kept_in(data_dir: Path | None) -> Iterator[None]:
    """Inside the block, :func:`spline_coefficients` keeps the natural-spline coefficients of paths with missing
    values in ``<data_dir>/.ndebench_cache/`` and reads them from there (``None``: it computes them every time).

    torchcde fits such a spline series by series in Python: 178 s of CPU for 1,000 Sepsis-sized stays (72 hours,
    41 channels, 30% missing), at that rate over an hour for Sepsis's training split of about 28,000 stays, and
    every trial of a split fits the same one. The entry's key digests the path's and the grid's bytes, dtypes and
    shapes and the torch and torchcde versions, so another split, seed or missing-value draw gets its own entry; a
    hit is the same tensor bit for bit.
    """
    token = _KEPT_IN.set(data_dir)
    try:
        yield
    finally:
        _KEPT_IN.reset(token)


def _natural_coefficients(times: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    folder = _KEPT_IN.get()
    if folder is None or not bool(torch.isnan(path).any()):
        return torchcde.natural_cubic_coeffs(path, t=times)
    digest = hashlib.sha256()
    for tensor in (times, path):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy())
    params = {"data": digest.hexdigest(), "torch": torch.__version__, "torchcde": torchcde.__version__}
    kept, _ = cached(cache_path(folder, "natural-spline", params),
                     lambda: {"coeffs": torchcde.natural_cubic_coeffs(path, t=times)})
    return kept["coeffs"].to(path.device)


def with_time_channel(times: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``[t, x]``: prepend the time channel to ``values`` ``(N, L, C)`` -> ``(N, L, C + 1)``."""
    return torch.cat([times.view(1, -1, 1).expand(values.shape[0], -1, 1).to(values.dtype), values], dim=-1)


def fill_missing_linear(times: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """``path`` ``(N, L, C)`` with NaNs filled as torchcde's linear interpolation fills them, vectorized.

    Per (sample, channel): linear in ``times`` between the neighbouring observations, the first (last)
    observation carried to the start (end), and 0 for a channel never observed. torchcde does this in a
    Python loop per series, which takes minutes on a few thousand Sepsis stays.
    """
    observed = ~torch.isnan(path)
    index = torch.arange(path.shape[1], device=path.device).view(1, -1, 1).expand_as(path)
    prev = torch.where(observed, index, torch.full_like(index, -1)).cummax(dim=1).values
    nxt = torch.where(observed, index, torch.full_like(index, path.shape[1])).flip(1).cummin(dim=1).values.flip(1)
    has_prev, has_next = prev >= 0, nxt < path.shape[1]
    prev_i, next_i = prev.clamp(min=0), nxt.clamp(max=path.shape[1] - 1)
    values = torch.nan_to_num(path)
    x_prev, x_next = values.gather(1, prev_i), values.gather(1, next_i)
    t = times.to(path.dtype).view(1, -1, 1).expand_as(path)
    t_prev, t_next = t.gather(1, prev_i), t.gather(1, next_i)
    ratio = (t - t_prev) / torch.where(next_i > prev_i, t_next - t_prev, torch.ones_like(t))
    between = x_prev + ratio * (x_next - x_prev)
    filled = torch.where(has_prev & has_next, between,
                         torch.where(has_prev, x_prev, torch.where(has_next, x_next, 0.0)))
    return torch.where(observed, path, filled)


def spline_coefficients(times: torch.Tensor, path: torch.Tensor,
                        interpolation: Interpolation = "hermite") -> torch.Tensor:
    """torchcde coefficients of ``path`` ``(N, L, C)`` on ``times`` ``(L,)``; NaNs filled as torchcde fills them.

    ``hermite``: Hermite cubic with backward differences (Kidger's recommended control for online use and
    the SNSDE/NCDE reference pipeline); ``natural``: natural cubic spline through each series' observed
    points (torchcde's own missing-value handling; kept on disk inside :func:`natural_splines_kept_in`);
    ``linear``: piecewise linear. For ``hermite`` and ``linear`` the NaNs are first filled by
    :func:`fill_missing_linear`, which is what torchcde does.
    """
    if interpolation == "hermite":
        return torchcde.hermite_cubic_coefficients_with_backward_differences(fill_missing_linear(times, path), t=times)
    if interpolation == "natural":
        return _natural_coefficients(times, path)
    if interpolation == "linear":
        return torchcde.linear_interpolation_coeffs(fill_missing_linear(times, path), t=times)
    raise ValueError(f"unknown interpolation {interpolation!r}; valid: hermite, natural, linear")


def control_path(times: torch.Tensor, coeffs: torch.Tensor, interpolation: Interpolation = "hermite"):
    """The torchcde interpolation object ``X`` built from :func:`spline_coefficients`'s output."""
    if interpolation == "linear":
        return torchcde.LinearInterpolation(coeffs, t=times)
    return torchcde.CubicSpline(coeffs, t=times)
