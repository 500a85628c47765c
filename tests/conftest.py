"""Test order, the tests' temporary folders in RAM, new MLflow stores from a kept schema, the ``gpu`` lane and the
fixtures several files share.

Files with ``system`` tests (Ray, servers, clusters: the long ones) go first, the longest of all in the order
of :data:`LONGEST`, so that under the Makefile's two pytest-xdist workers (whole files each, handed out in this
order because of ``--no-loadscope-reorder``) no long file starts last while the other worker idles."""
from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# Longest first: the system files by their time on an idle machine (2026-11-29, alone or in a whole-suite timeline:
# test_interruptions 207 s, test_lease 199, test_outages 117, test_stack_sweep 95, test_sweep 70) and by how many
# sweeps each drives; then the slowest fast-lane files of a `--durations` profile. Without `--no-loadscope-reorder`
# pytest-xdist hands out the files with the most tests first, which put the one-test cluster and sweep files at the
# very end of `make test`.
LONGEST = ("test_interruptions.py", "test_lease.py", "test_outages.py", "test_stack_sweep.py", "test_sweep.py",
           "test_security.py", "test_exposure.py", "test_timeouts.py", "test_ray_job.py", "test_faults.py",
           "test_deletions.py", "test_disk_full.py", "test_two_nodes.py", "test_scale.py", "test_resume_holes.py",
           "test_analyses.py", "test_report_settings.py", "test_api.py", "test_tracking.py", "test_report.py",
           "test_paper_comparison.py", "test_learning.py", "test_continuation.py", "test_infrastructure.py")


# Where pytest's temporary folders go unless --basetemp is given: a fresh folder in RAM, removed at the end. SQLite
# syncs every commit to the disk, and every MLflow store, Ray results folder and sweep of a test lives there: on the
# project's 2-core VM a new MLflow store took 4.3 s on disk and 0.7 s in RAM, five store-heavy files run in one
# process half as long and the sweeps of two system files 23% less (docs/investigations/test-timings.md). Only
# where the RAM disk can hold a whole run (about 1.1 GB, the wheel test's venv most of it) and may run programs;
# else pytest's default.
RAM_DISK = Path("/dev/shm")
RAM_DISK_FREE = 4 * 1024**3
_IN_RAM = pytest.StashKey[str]()


def _ram_disk_usable() -> bool:
    try:
        return (os.access(RAM_DISK, os.W_OK | os.X_OK) and shutil.disk_usage(RAM_DISK).free >= RAM_DISK_FREE
                and not os.statvfs(RAM_DISK).f_flag & os.ST_NOEXEC)
    except OSError:
        return False


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's workers get their folder under the controller's, as --basetemp.
    if config.option.basetemp is None and not hasattr(config, "workerinput") and _ram_disk_usable():
        config.option.basetemp = config.stash[_IN_RAM] = tempfile.mkdtemp(prefix="ndebench-tests.", dir=RAM_DISK)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if (folder := config.stash.get(_IN_RAM, None)) is not None:
        shutil.rmtree(folder, ignore_errors=True)
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker has sent its last report by now. Python's own teardown of its heap (torch, MLflow,
        # Ray, pandas) then took 4-5 s, which the controller waited out before it could end the run; the exit
        # handlers still run, the heap's teardown is left to the operating system.
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    import torch

    long_files = {item.path for item in items if item.get_closest_marker("system")}
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: (item.path not in long_files, rank.get(item.path.name, len(LONGEST))))
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)


def _replay_the_first_schema() -> None:
    """MLflow's ``_initialize_tables`` for a new sqlite store made in a test process becomes the schema its
    migrations build, replayed from a dump of one store they built in this process. The migrations cost 0.4-0.6 s
    of CPU per store and the fast lane makes a new store in most of its tests; every driver and server the tests
    start as a process still runs the real migrations, as does this process's first store."""
    try:
        import mlflow.store.db.utils as db
    except ImportError:  # .ci/gpu/run.sh runs the ``gpu`` lane on a machine without MLflow
        return
    migrate, schema = db._initialize_tables, []

    def initialize(engine) -> None:
        if engine.dialect.name != "sqlite":
            migrate(engine)
            return
        if not schema:
            migrate(engine)
        with contextlib.closing(engine.raw_connection()) as raw:
            if schema:
                raw.driver_connection.executescript(schema[0])
            else:
                schema.append("\n".join(raw.driver_connection.iterdump()))

    db._initialize_tables = initialize


def pytest_collection_finish(session: pytest.Session) -> None:
    # Here, not at import: the pytest-xdist controller, which collects nothing, loads this file too, and every
    # import at its top would delay the workers' start (torch, MLflow and torchvision took 6 s there).
    _replay_the_first_schema()
    # Everything imported so far (torch, MLflow, Ray, pandas: millions of long-lived objects) leaves the cyclic
    # collector's view. statsmodels' Holm correction calls gc.collect() on every call, and a report makes dozens;
    # over the full heap of a test process each took 0.1-0.3 s, half of some report tests' time.
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _registries_as_found():
    """Each test file sees the registries as a fresh process does. A sweep driven in-process installs a plugin
    (``tests/fakes.py``'s ``ndebench_*`` modules) whose components would otherwise stay registered and show up
    in the valid-name lists of every later file on the same pytest-xdist worker."""
    from ndebench.datasets.registry import REGISTRY as DATASETS
    from ndebench.models.registry import REGISTRY as MODELS
    from ndebench.platform.common import plugins
    from ndebench.regularizers.registry import REGISTRY as REGULARIZERS

    registries = (MODELS, REGULARIZERS, DATASETS)
    for registry in registries:
        registry.load()  # the built-ins register on their modules' first import only: keep them in the snapshot
    saved = [(dict(r._factories), dict(r._info)) for r in registries]
    loaded = set(plugins._LOADED)
    yield
    for registry, (factories, info) in zip(registries, saved, strict=True):
        registry._factories.clear()
        registry._factories.update(factories)
        registry._info.clear()
        registry._info.update(info)
    plugins._LOADED.intersection_update(loaded)
    for name in [m for m in sys.modules if m.startswith("ndebench_")]:
        del sys.modules[name]


@pytest.fixture
def uri(tmp_path) -> str:
    """A sqlite tracking store of its own in the test's temporary folder (created at first use)."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


@pytest.fixture
def fake_md5(monkeypatch):
    """torchvision's MD5 check against the fake files' own recorded MD5s (a later change is caught)."""
    import torchvision.datasets.cifar
    import torchvision.datasets.stl10
    import torchvision.datasets.svhn
    from torchvision.datasets.utils import calculate_md5

    recorded: dict[str, str] = {}

    def check_integrity(fpath, md5=None):
        return Path(fpath).is_file() and recorded.get(str(fpath)) == calculate_md5(str(fpath))

    for module in (torchvision.datasets.cifar, torchvision.datasets.svhn, torchvision.datasets.stl10):
        monkeypatch.setattr(module, "check_integrity", check_integrity)

    def record(root: Path) -> None:
        recorded.update({str(p): calculate_md5(str(p)) for p in root.rglob("*") if p.is_file()})

    return record


@pytest.fixture(scope="module")
def one_cpu_ray():
    """The local Rays that a module's drivers start get one CPU (Ray's ``RAY_OVERRIDE_RESOURCES``), so a stage
    runs its trials one after another on one reused worker process. Each trial worker's start (Ray, Tune, torch,
    MLflow and scikit-learn imports, torch's first optimizer) costs about 6 s of CPU, more than the few epochs a
    test trial trains, and with Ray's two CPUs every stage of two or more trials started two; files whose tests
    are about trials running side by side do not use this."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_OVERRIDE_RESOURCES", json.dumps({"CPU": 1}))
        yield


@pytest.fixture(scope="module")
def local_ray():
    """A small local Ray for a module's in-process sweeps (``main(["run", ...])`` joins it), ended after them: one
    CPU, so that each stage reuses one trial worker (see ``one_cpu_ray``)."""
    import ray
    from fakes import local_ray_arguments

    ray.init(**local_ray_arguments(1))
    yield
    ray.shutdown()
