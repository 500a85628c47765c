"""The built wheel installs beside another torch without touching it, ships its configs, and runs the quickstart.

A fresh venv first gets a torch other than constraints.txt's (a wheel already on this machine: pip's find-links),
with its torchvision; the rest of ndebench's dependencies come from this test's own environment through a ``.pth``
line (a stand-in for the other tool's environment: installing Ray, MLflow and the rest again would take gigabytes
and minutes and prove nothing about torch). Then the wheel is installed with pip's normal resolution, and pip's
``--report`` must show that it installed neither torch, nor torchvision, nor a CUDA library.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[1]


def _other_torch_wheel() -> Path | None:
    """A CPython 3.11 torch wheel in pip's find-links whose version is not the installed one."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    folders = {Path(p) for line in out.stdout.splitlines() if "find-links" in line
               for p in line.split("=", 1)[1].strip("'\" ").split()}
    mine = version("torch").split("+")[0]
    wheels = [w for folder in folders if folder.is_dir() for w in folder.glob("torch-*-cp311-*.whl")
              if w.name.split("-")[1].split("+")[0] != mine]
    return sorted(wheels)[-1] if wheels else None


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_the_wheel_installs_beside_another_torch_and_runs_the_shipped_quickstart(tmp_path):
    torch_wheel = _other_torch_wheel()
    if torch_wheel is None:
        pytest.skip("no second torch wheel on this machine (pip's find-links); downloading one is not a test's job")
    other = torch_wheel.name.split("-")[1]
    minor = int(other.split(".")[1])  # torch 2.N pairs with torchvision 0.(N + 15)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
          str(tmp_path / "dist"), str(ROOT)], timeout=600)
    wheel = next((tmp_path / "dist").glob("ndebench-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python, pip = venv / "bin" / "python", [str(venv / "bin" / "python"), "-m", "pip", "-q"]
    _run([*pip, "install", str(torch_wheel), f"torchvision==0.{minor + 15}.*", "--no-deps"], timeout=900)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "other_tools.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    report = tmp_path / "report.json"
    _run([*pip, "install", "--report", str(report), str(wheel)], timeout=900)
    installed = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    # A venv's own bundled setuptools may be upgraded for some requirement; torch and its CUDA libraries never.
    assert "ndebench" in installed and not [n for n in installed if n.startswith(("torch", "nvidia"))], installed
    versions = _run([str(python), "-c", "import torch, ndebench.platform.cli.main as cli; print(torch.__version__); "
                     "print(cli.__file__)"]).stdout.split()
    assert versions[0] == other and versions[1].startswith(str(site)), versions
    requires = _run([str(python), "-c", "from importlib.metadata import requires; print(requires('ndebench'))"])
    assert re.search(r"'torch<3,>=2\.\d+'|'torch>=2\.\d+,<3'", requires.stdout), requires.stdout

    configs = _run([str(venv / "bin" / "ndebench"), "configs"], cwd=tmp_path).stdout
    assert re.search(r"^quickstart +Neural CDE on UEA BasicMotions", configs, re.M), configs
    work = tmp_path / "work"
    work.mkdir()
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "PYTHONPATH")}
    env["RAY_OVERRIDE_RESOURCES"] = json.dumps({"CPU": 1})  # one trial worker for the evaluate stage's two trials
    # Values instead of grids: the base and tune stages have nothing to search, so only the evaluate stage runs
    # (one trial worker, about 6 s of CPU, instead of three).
    sweep = subprocess.run(
        [str(venv / "bin" / "ndebench"), "run", "quickstart", "--tracking-uri", uri, "--set", "training.epochs=1",
         "training.min_epochs=1", "evaluate.seeds=[0]", "regularizers.continuum_dropout.p=0.3",
         "regularizers.continuum_dropout.m=5", "training.lr=0.01"],
        cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert sweep.returncode == 0, sweep.stdout[-4000:] + sweep.stderr[-4000:]
    assert "Ray cluster: 1 CPU," in sweep.stdout
    tags = _run([str(python), "-c", "import json, mlflow; mlflow.set_tracking_uri(" + repr(uri) + "); runs = "
                 "mlflow.search_runs(experiment_names=['quickstart'], filter_string=\"tags.`ndebench.kind` = 'trial'\","
                 " output_format='list'); print(json.dumps([r.data.tags for r in runs]))"], env=env).stdout
    trials = json.loads(tags.strip().splitlines()[-1])
    assert len(trials) == 2, trials  # the evaluate stage's two trials
    assert all(t["ndebench.lib.torch"] == other and t["ndebench.torch_build"] == other for t in trials)
