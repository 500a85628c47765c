"""A package like its neighbours: `python -m`, a fast `--help`/`--version`, license and citation files, typed
packages, ranges in pyproject.toml with the tested versions in constraints.txt, the commit a build records."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ndebench.platform.engine.provenance import git_state

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_answer_without_torch(flag):
    code = (f"import sys; sys.argv = ['ndebench', '{flag}']\n"
            "from ndebench.platform.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'ray' in sys.modules, 'mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False False False"


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "ndebench.platform", "--version"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and re.fullmatch(r"ndebench \S+\n", out.stdout), out.stdout + out.stderr


def test_license_citation_changelog_and_typed_packages():
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    citation = (ROOT / "CITATION.cff").read_text()
    assert "cff-version" in citation and "preferred-citation" in citation
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in packages["packages"]:
        folder = ROOT / packages["package-dir"][".".join(package.split(".")[:2])] / Path(*package.split(".")[2:])
        assert (folder / "py.typed").exists() or not any(folder.glob("*.py")), package


def test_dependencies_are_ranges_and_constraints_pin_what_was_tested():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [d for extra in project["optional-dependencies"].values() for d in extra]
    assert not [d for d in requirements if "==" in d], "exact versions belong in constraints.txt"
    for name in ("torch", "torchvision", "ray[tune]"):
        assert re.fullmatch(rf"{re.escape(name)}>=[\d.]+,<\d+", next(d for d in project["dependencies"]
                                                                      if d.startswith(f"{name}>"))), name
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("torch", "mlflow", "optuna", "ray", "numpy", "scikit-learn", "sktime", "scipy"):
        assert name in pins, f"constraints.txt lacks {name}"
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


def test_a_build_records_its_commit_for_installs_without_git(tmp_path):
    (tmp_path / "build_info.json").write_text(json.dumps({"version": "0.1.0", "git_commit": "abc123"}))
    assert git_state(tmp_path) == ("abc123", None)


def test_kuberay_example_runs_a_shipped_paper_config_against_a_tracking_server():
    import yaml

    job = yaml.safe_load((ROOT / "docs" / "kubernetes" / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and job["spec"]["rayClusterSpec"]["rayVersion"].startswith("2.60")
    config = job["spec"]["entrypoint"].split()[2]
    assert (ROOT / "tune_configs" / Path(config).name).exists() and config.startswith("/home/ray/ndebench/")
    assert "--address" not in job["spec"]["entrypoint"]
    assert "MLFLOW_TRACKING_URI" in yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    assert job["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    cluster_page = (ROOT / "docs" / "cluster.md").read_text()
    heads = [line for line in cluster_page.splitlines() if "ray start --head" in line]
    assert len(heads) == 2 and all("--dashboard-host 0.0.0.0" in line for line in heads)
