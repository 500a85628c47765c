"""Ends a stage's Ray Tune run as soon as the driver's lease is found lost (by its heartbeat thread), so that a
driver taken over while paused stops within one step of Tune's loop, not at the stage's end."""
from __future__ import annotations

from typing import Any

from ndebench.platform.record.lease.fence import raise_if_driver_lost
from ray import tune


class LeaseWatch(tune.Callback):
    """Raises the driver's :class:`~ndebench.platform.record.lease.fence.LeaseLostError` (no I/O) at the start of
    every step of Tune's loop; stateless, since Tune pickles its callbacks."""

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        raise_if_driver_lost()
