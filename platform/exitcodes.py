"""Exit codes of every ``ndebench`` command, in one place (README, Command line)."""
from __future__ import annotations

OK = 0
FAILED = 1  # a sweep ended with failed cells or planned evaluate runs that are not ok
BAD_INPUT = 2  # config, flags or paths refused before Ray starts
INFRASTRUCTURE = 3  # the machine failed the sweep: a full disk
HANGUP = 129  # SIGHUP (the terminal closed), as a shell reports it
INTERRUPTED = 130  # SIGINT (Ctrl-C), as a shell reports it
TERMINATED = 143  # SIGTERM
