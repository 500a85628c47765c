"""Test order, the ``gpu`` lane and the fixtures several files share.

The files that start Ray clusters and servers go first, so that under `make test`'s two pytest-xdist workers
(whole files each) no long file starts last while the other worker idles."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision.datasets.cifar
import torchvision.datasets.stl10
import torchvision.datasets.svhn
from torchvision.datasets.utils import calculate_md5

SLOW_FIRST = ("test_faults.py", "test_sweep.py", "test_security.py", "test_two_nodes.py", "test_resume_holes.py",
              "test_server.py", "test_paper_configs.py", "test_cli.py", "test_disk_full.py", "test_analyses.py",
              "test_tracking.py", "test_report.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def fake_md5(monkeypatch):
    """torchvision's MD5 check against the fake files' own recorded MD5s (a later change is caught)."""
    recorded: dict[str, str] = {}

    def check_integrity(fpath, md5=None):
        return Path(fpath).is_file() and recorded.get(str(fpath)) == calculate_md5(str(fpath))

    for module in (torchvision.datasets.cifar, torchvision.datasets.svhn, torchvision.datasets.stl10):
        monkeypatch.setattr(module, "check_integrity", check_integrity)

    def record(root: Path) -> None:
        recorded.update({str(p): calculate_md5(str(p)) for p in root.rglob("*") if p.is_file()})

    return record
