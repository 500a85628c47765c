"""Test order: the files that start Ray clusters and servers go first, so that under `make test`'s two
pytest-xdist workers (whole files each) no long file starts last while the other worker idles."""
from __future__ import annotations

import pytest

SLOW_FIRST = ("test_faults.py", "test_sweep.py", "test_security.py", "test_two_nodes.py", "test_resume_holes.py",
              "test_server.py", "test_paper_configs.py", "test_cli.py", "test_disk_full.py", "test_analyses.py",
              "test_tracking.py", "test_report.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
