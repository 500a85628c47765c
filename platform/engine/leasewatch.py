"""Ends a stage's Ray Tune run as soon as the driver's lease is found lost (by its heartbeat thread), so that a
driver taken over while paused stops within one step of Tune's loop, not at the stage's end."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray import tune


class LeaseWatch(tune.Callback):
    """Calls ``raise_if_lost`` (no I/O) at the start of every step of Tune's loop."""

    def __init__(self, raise_if_lost: Callable[[], None]):
        self.raise_if_lost = raise_if_lost

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self.raise_if_lost()
