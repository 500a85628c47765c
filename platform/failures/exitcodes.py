"""Exit codes of every ``ndebench`` command, in one place (docs/cli.md and docs/faults.md)."""
from __future__ import annotations

OK = 0
FAILED = 1  # a sweep ended with failed cells or planned evaluate runs that are not ok
BAD_INPUT = 2  # config, flags or paths refused before Ray starts; credentials a tracking server refuses (401/403)
# What the sweep runs on failed (a full disk; a tracking server, database, Ray or storage that cannot be
# reached or written, before or during the sweep): platform.outage, platform.diskfull
INFRASTRUCTURE = 3
HANGUP = 129  # SIGHUP (the terminal closed), as a shell reports it
INTERRUPTED = 130  # SIGINT (Ctrl-C), as a shell reports it
TERMINATED = 143  # SIGTERM
