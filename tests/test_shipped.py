"""Shipped configs are found by name (`ndebench run quickstart` from any install); the container and KubeRay
files run one image with Ray token authentication and say which GPU driver they need."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ndebench.platform.cli.main import main
from ndebench.platform.spec.shipped import resolve_config, shipped_configs
from ndebench.platform.spec.sweepspec import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_every_config_in_tune_configs_is_shipped_by_name():
    shipped = shipped_configs()
    assert sorted(shipped) == sorted(p.stem for p in (ROOT / "tune_configs").glob("*.yaml"))
    assert shipped["quickstart"].read_text() == (ROOT / "tune_configs" / "quickstart.yaml").read_text()


def test_a_name_resolves_a_path_stays_and_a_typo_is_answered(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config("quickstart") == str(shipped_configs()["quickstart"])
    assert resolve_config("mine.yaml") == "mine.yaml"  # a path, even a missing one: load_spec says it is missing
    (tmp_path / "quickstart").write_text("study: local\n")
    assert resolve_config("quickstart") == "quickstart"  # a file of that name wins
    with pytest.raises(ConfigError, match=r"'quikstart' is neither a file nor a shipped config \(did you mean "
                                          r"'quickstart'\?\); shipped: all_regularizers, "):
        resolve_config("quikstart")


def test_configs_lists_names_and_descriptions(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(shipped_configs())
    assert any(line.startswith("quickstart ") and "Continuum Dropout vs no regularization" in line for line in lines)


def test_validate_takes_a_shipped_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "quickstart"]) == 0
    assert f"{shipped_configs()['quickstart']}: valid" in capsys.readouterr().out


def test_kuberay_runs_one_image_with_token_auth_and_the_driver_is_documented():
    job = yaml.safe_load((ROOT / "docs" / "kubernetes" / "rayjob.yaml").read_text())
    cluster = job["spec"]["rayClusterSpec"]
    images = {c["image"] for c in cluster["headGroupSpec"]["template"]["spec"]["containers"]}
    for group in cluster["workerGroupSpecs"]:
        images |= {c["image"] for c in group["template"]["spec"]["containers"]}
    assert len(images) == 1
    assert cluster["authOptions"] == {"mode": "token"}
    constraints = (ROOT / "constraints.txt").read_text()
    assert "nvidia-cuda-runtime==13." in constraints
    cluster_page = (ROOT / "docs" / "cluster.md").read_text()
    assert "NVIDIA driver that supports CUDA 13" in cluster_page and "R580" in cluster_page
    assert ".git" in (ROOT / ".dockerignore").read_text().splitlines()
