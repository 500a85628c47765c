"""A trial's time limit, ``tune.trial_timeout_s``: checked between mini-batches, so that one long epoch is cut too."""
from __future__ import annotations

import time


class TrialTimeout(Exception):
    """A trial ran past its time limit; ``str`` names ``tune.trial_timeout_s`` and the time spent."""


class Deadline:
    """``limit_s`` seconds from now (``None``: never). :meth:`check` raises :class:`TrialTimeout` once passed."""

    def __init__(self, limit_s: float | None):
        self.limit_s, self.start = limit_s, time.monotonic()

    def check(self) -> None:
        """Raise :class:`TrialTimeout` when more than ``limit_s`` seconds have passed since this was made."""
        if self.limit_s is None:
            return
        elapsed = time.monotonic() - self.start
        if elapsed > self.limit_s:
            raise TrialTimeout(f"exceeded tune.trial_timeout_s={self.limit_s:g} ({elapsed:.1f} s since the trial "
                               "started or resumed)")
