"""A full disk, recognised in whatever wrapping it arrives (OSError, pyarrow, SQLite through SQLAlchemy and
MLflow), and named by the path that could not be written: an infrastructure failure (exit 3), not bad input."""
from __future__ import annotations

import errno
import re

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_MESSAGES = ("no space left on device", "database or disk is full", "disk quota exceeded")


class DiskFullError(OSError):
    """Raised by ndebench when a write failed because a disk or quota is full; ``str`` names the path."""


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it was raised from or while handling, outermost first."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is a full disk or quota."""
    return any((isinstance(e, OSError) and e.errno in FULL_ERRNOS)
               or any(text in str(e).lower() for text in FULL_MESSAGES) for e in exception_chain(exc))


def full_path(exc: BaseException, fallback: str, database: str | None = None) -> str:
    """The path a disk-full ``exc`` names (``OSError.filename``, or a path in its message), ``database`` for
    SQLite's "database or disk is full", else ``fallback``."""
    chain = exception_chain(exc)
    if database and any("database or disk is full" in str(e).lower() for e in chain):
        return database
    for e in chain:
        if isinstance(e, OSError) and e.filename:
            return str(e.filename)
        found = re.search(r"(?:file|path)[: ]+'?(/[^\s',]+)", str(e))
        if found:
            return found.group(1)
    return fallback


def disk_full(exc: BaseException, fallback: str, database: str | None = None) -> DiskFullError:
    """A :class:`DiskFullError` for ``exc``: the path that is full and the original message."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DiskFullError(f"disk full: cannot write {full_path(exc, fallback, database)} ({first[:300]})")
