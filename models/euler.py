"""torchdiffeq's fixed-grid Euler solve of ``z(T)``, stepped here op for op without its per-step wrappers.

On the CPU a training pass of a small model spends a fifth of its time in torchdiffeq's per-step work rather than in
the field: the time is cast through a tensor's ``abs()``, perturbed through a custom autograd function, and each
output is copied into a solution buffer (docs/performance.md, "The Euler step without torchdiffeq's wrappers").
"""
from __future__ import annotations

from typing import Any

import torch
from ndebench.regularizers.base import StepClock


def euler_final(field: Any, z0: torch.Tensor, grid: torch.Tensor, clock: StepClock | None = None,
                masks: torch.Tensor | None = None) -> torch.Tensor:
    """``z(T)`` ``(B, H)`` of ``dz = f(t, z) dt`` from ``z0`` ``(B, H)`` by Euler on ``grid`` ``(S+1,)``.

    Step ``k``: ``z_{k+1} = z_k + dt_k * f(t_k', z_k)`` with ``dt_k = grid[k+1] - grid[k]`` in the grid's dtype and
    ``t_k' = nextafter(grid[k], grid[k] + 1)`` in ``z``'s dtype: torchdiffeq's Euler with ``perturb=True``, the same
    operations on the same values, so the same bits forward and backward (``tests/test_euler.py``).

    ``clock``: counted as torchdiffeq's step callback counts it (``forward_step`` before each step) and set as the
    field's step while the field is evaluated. ``masks`` ``(S', B, H)``, with ``clock``: a regularizer's 0/1 masks
    (``Regularizer.step_mask``), taken into the step as ``z_{k+1} = z_k + (masks[c] * dt_k) * f`` (``c`` the counted
    step) where the field would return ``f * masks[c]``: the masked field's step bit for bit, the mask's product
    made outside autograd.
    """
    starts = grid[:-1].to(z0.dtype)
    starts = torch.nextafter(starts, starts + 1).unbind(0)
    dt = grid[1:] - grid[:-1]
    steps = dt.unbind(0)
    # dt as the multiply with z's dtype reads it (a float64 0-dim dt times float32 is a float32 dt times it)
    scales = None if masks is None else dt.to(z0.dtype).unbind(0)
    z = z0
    try:
        for k, t in enumerate(starts):
            if clock is not None:
                clock.forward_step()
                clock.step = clock.counted
            f = field(t, z)
            z = z + steps[k] * f if masks is None else z + torch.mul(masks[clock.counted], scales[k]) * f
    finally:
        if clock is not None:
            clock.step = None
    return z
