"""Build hook: write the version and the git commit into the built package (``ndebench/platform/build_info.json``),
so that a wheel or a container image, which has no git checkout, still records which code it is. Everything else
is in pyproject.toml."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).parent)
    except (OSError, subprocess.TimeoutExpired):
        out = None
    # A build context without .git (a Docker build) passes the commit in NDEBENCH_GIT_COMMIT.
    return out.stdout.strip() if out is not None and out.returncode == 0 else os.environ.get("NDEBENCH_GIT_COMMIT", "")


class BuildWithInfo(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "ndebench" / "platform" / "build_info.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        info = {"version": self.distribution.get_version(), "git_commit": _commit() or "unknown"}
        target.write_text(json.dumps(info))


setup(cmdclass={"build_py": BuildWithInfo})
