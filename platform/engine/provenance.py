"""Which code, which libraries and which machine produced a run: the provenance tags of every MLflow run.

:func:`driver_provenance` is captured once on the driver, for the study and cell runs it writes;
:func:`worker_provenance` in the process that runs the trial, so that a trial run records the code, libraries,
torch build and CUDA of the node it ran on (a cluster's head and workers may run different images). A worker
without a git checkout or a build record leaves the commit to the driver's tags.
"""
from __future__ import annotations

import json
import platform
import socket
import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

LIBRARIES = ("torch", "torchdiffeq", "torchsde", "torchcde", "ray", "optuna", "mlflow", "numpy", "scipy",
             "scikit-learn", "pandas", "sktime", "librosa")


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def _git(source: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def build_info(source: Path) -> dict[str, str]:
    """What the build wrote into an installed package (``build_info.json``: version, git commit); ``{}`` in a
    source checkout."""
    try:
        return json.loads((source / "build_info.json").read_text())
    except (OSError, ValueError):
        return {}


def git_state(source: Path) -> tuple[str, bool | None]:
    """``(commit, dirty)`` of the git checkout holding ``source``; outside a checkout (a wheel or an image) the
    commit the build recorded, else ``("unknown", None)``. Dirty means tracked or untracked-not-ignored files
    differ from the commit, anywhere in the checkout (models/ and regularizers/ decide results as much as
    ``source`` does)."""
    commit = _git(source, "rev-parse", "HEAD")
    if commit is None:
        return build_info(source).get("git_commit", "unknown"), None
    status = _git(source, "status", "--porcelain", "--untracked-files=normal")
    return commit, bool(status)


@lru_cache(maxsize=1)
def driver_provenance() -> dict[str, str]:
    """Tags (without the ``ndebench.`` prefix) that describe the code: ``version``, ``git_commit``,
    ``git_dirty``, ``python`` and ``lib.<name>`` for each library in :data:`LIBRARIES`."""
    return code_provenance()


def code_provenance() -> dict[str, str]:
    """:func:`driver_provenance`'s tags, read in the calling process."""
    source = Path(__file__).resolve().parent.parent
    commit, dirty = git_state(source)
    tags = {
        "version": _version("ndebench"),
        "git_commit": commit,
        "git_dirty": "unknown" if dirty is None else str(dirty).lower(),
        "python": platform.python_version(),
    }
    tags.update({f"lib.{name}": _version(name) for name in LIBRARIES})
    return tags


def device_description(device: str) -> str:
    """``"cuda: <GPU name>, CUDA <version>"`` on a GPU, else ``"cpu: <CPU model>"``."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0
        return f"cuda: {torch.cuda.get_device_name(index)}, CUDA {torch.version.cuda}"
    return f"cpu: {_cpu_model()}"


@lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ray_node_id() -> str:
    """The Ray node id of the calling process, or ``"local"`` outside Ray."""
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - provenance must never fail a trial
        pass
    return "local"


@lru_cache(maxsize=1)
def _worker_code() -> dict[str, str]:
    import torch

    tags = code_provenance()
    if tags["git_commit"] == "unknown":
        del tags["git_commit"], tags["git_dirty"]
    return tags | {"torch_build": torch.__version__, "cuda": torch.version.cuda or "none"}


def machine_provenance(device: str, threads: int | None = None) -> dict[str, str]:
    """The :data:`~ndebench.platform.record.schema.MACHINE_TAGS` of a trial on ``device`` with ``threads`` torch
    threads (default: this process's, which Ray sets from the trial's CPUs): ``cpu_model``, ``cpu_capability``
    (the instruction set torch dispatches its CPU kernels to: ``DEFAULT``, ``AVX2``, ``AVX512``, ...), ``threads``,
    and ``gpu`` (the device name, ``none`` on the CPU) with ``gpu_driver`` (the NVIDIA driver's version, ``none``
    on the CPU, ``unknown`` where neither NVML nor ``nvidia-smi`` answers). Two runs of one config agree bit for
    bit only where all of these (and the code and library tags) agree."""
    import torch

    gpu, driver = "none", "none"
    if device.startswith("cuda") and torch.cuda.is_available():
        gpu, driver = torch.cuda.get_device_name(torch.device(device).index or 0), _gpu_driver()
    return {"cpu_model": _cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": str(threads or torch.get_num_threads()), "gpu": gpu, "gpu_driver": driver}


@lru_cache(maxsize=1)
def _gpu_driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - NVML missing or refusing: ask nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else "unknown"


def worker_provenance(device: str, threads: int | None = None) -> dict[str, str]:
    """Tags that describe where and with what a trial ran, read in the trial's own process: ``host``, ``node``
    (Ray node id), ``device``, the code and library tags of :func:`driver_provenance` (the commit only where
    this node knows it), ``torch_build`` (``torch.__version__``, e.g. ``2.14.1+cu130``), ``cuda`` (the CUDA
    version torch was built with, ``none`` for a CPU build) and the machine's (:func:`machine_provenance`)."""
    return (_worker_code() | machine_provenance(device, threads)
            | {"host": socket.gethostname(), "node": ray_node_id(), "device": device_description(device)})
