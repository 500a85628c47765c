"""What MLflow users expect on a run: the standard user/source/commit tags and system metrics."""
from __future__ import annotations

import getpass
import time

import pytest
from ndebench.platform.record.system_metrics import system_metrics
from ndebench.platform.record.tracking import client, study_run


def test_study_run_carries_mlflow_standard_tags(uri):
    run_id = study_run(uri, "tags", description="d", params={}, yaml_text=None, tags={"git_commit": "abc123"})
    tags = client(uri).get_run(run_id).data.tags
    assert tags["mlflow.user"] == getpass.getuser()
    assert tags["mlflow.source.name"] == "ndebench" and tags["mlflow.source.git.commit"] == "abc123"


def test_system_metrics_sampled_into_the_run_and_switched_off(uri):
    pytest.importorskip("psutil", reason="system metrics need psutil (the `cluster` extra)")
    mlflow_client = client(uri)
    experiment = mlflow_client.create_experiment("metrics")
    sampled, quiet = (mlflow_client.create_run(experiment).info.run_id for _ in range(2))
    with system_metrics(sampled, uri, interval_s=0.5):
        time.sleep(2.0)
    with system_metrics(quiet, uri, enabled=False, interval_s=0.5):
        time.sleep(1.0)
    keys = set(mlflow_client.get_run(sampled).data.metrics)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= keys
    assert mlflow_client.get_run(quiet).data.metrics == {}
