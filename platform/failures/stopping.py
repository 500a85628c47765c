"""Signals that stop a sweep cleanly: SIGINT (Ctrl-C) arrives as ``KeyboardInterrupt``; SIGTERM and SIGHUP are
turned into :class:`Stopped`, a ``KeyboardInterrupt`` too, so that every stop takes the same path (runs closed
as ``interrupted``, exit 130, 143 or 129)."""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from ndebench.platform.failures import exitcodes

CAUGHT = {signal.SIGTERM: exitcodes.TERMINATED, signal.SIGHUP: exitcodes.HANGUP}


class Stopped(KeyboardInterrupt):
    """A stop signal other than SIGINT, raised in the main thread where it arrived."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_received: list[int] = []


def _raise(signum: int, frame: object) -> None:
    # Ray's native waits turn any exception a handler raises into a plain KeyboardInterrupt: the signal is
    # also remembered, so that describe() still names it.
    _received.append(signum)
    raise Stopped(signum)


_active = threading.Event()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Stopped`; the previous handlers come back after."""
    previous = {signum: signal.signal(signum, _raise) for signum in CAUGHT}
    _received.clear()
    _active.set()
    try:
        yield
    finally:
        _active.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def reclaim() -> None:
    """Within :func:`stop_on_signals`, put its handlers back after ``ray.init``, which replaces SIGTERM's with one
    that exits at once (and a native one that prints a stack) instead of stopping the sweep cleanly."""
    if _active.is_set() and threading.current_thread() is threading.main_thread():
        for signum in CAUGHT:
            signal.signal(signum, _raise)


def describe(stop: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the sweep, as a user reads it, and the exit code a shell would report for it."""
    signum = stop.signum if isinstance(stop, Stopped) else _received[0] if _received else None
    if signum is None:
        return "SIGINT (Ctrl-C)", exitcodes.INTERRUPTED
    return signal.Signals(signum).name, CAUGHT[signum]
