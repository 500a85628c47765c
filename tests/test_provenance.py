"""A trial's provenance is read in its own process: libraries, torch build and CUDA of the node it ran on."""
from __future__ import annotations

import pytest
import torch
from ndebench.platform.engine import provenance


@pytest.fixture
def fresh_worker():
    provenance._worker_code.cache_clear()
    yield
    provenance._worker_code.cache_clear()


def test_worker_reads_its_own_libraries_and_torch_build(monkeypatch, fresh_worker):
    driver = provenance.driver_provenance()
    monkeypatch.setattr(provenance, "version", lambda name: "0.0.0+worker" if name == "torchcde" else "1")
    tags = provenance.worker_provenance("cpu")
    assert tags["lib.torchcde"] == "0.0.0+worker" != driver["lib.torchcde"]
    assert (tags["torch_build"], tags["cuda"]) == (torch.__version__, torch.version.cuda or "none")
    assert tags["git_commit"] == driver["git_commit"]


def test_a_worker_without_a_commit_keeps_the_drivers(monkeypatch, fresh_worker):
    monkeypatch.setattr(provenance, "git_state", lambda source: ("unknown", None))
    tags = provenance.worker_provenance("cpu")
    assert "git_commit" not in tags and "git_dirty" not in tags and tags["version"]
