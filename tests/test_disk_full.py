"""A full disk is an infrastructure failure (exit 3) whose message names the path: on real small tmpfs mounts
where this machine allows them (the tracking database; the storage path filling up during a sweep), and with
`ENOSPC` injected where a sweep writes Ray's log and logs its report to the artifact store. The report files are
still written and no run is left running."""
from __future__ import annotations

import contextlib
import errno
import io
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import yaml
from fakes import local_ray_arguments
from ndebench.platform.cli.main import main
from ndebench.platform.cluster.raysession import RaySession
from ndebench.platform.failures.diskfull import disk_full, is_disk_full
from ndebench.platform.record import store, tracking
from ndebench.platform.record.tracking import TAG, run_status, search

TINY = {"study": "full", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}}


def _enospc(path: str) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", path)


def test_disk_full_is_recognised_through_wrappers():
    try:
        try:
            raise _enospc("/data/x.log")
        except OSError as inner:
            raise RuntimeError("writing failed") from inner
    except RuntimeError as exc:
        assert is_disk_full(exc) and "cannot write /data/x.log" in str(disk_full(exc, "/fallback"))
    sqlite = RuntimeError("(sqlite3.OperationalError) database or disk is full")
    assert is_disk_full(sqlite) and "cannot write /db/mlflow.db" in str(disk_full(sqlite, "/cwd", "/db/mlflow.db"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied", "/x"))


@contextlib.contextmanager
def _tmpfs(path: Path, size: str):
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "--lazy", str(path)], check=True)  # the store keeps its file open


def test_a_full_disk_under_the_tracking_database_exits_3_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(TINY))
    with _tmpfs(tmp_path / "small", "16k") as mounted:
        if not mounted:  # no mount here: the store's first write fails as SQLite's would
            def full(*args, **kwargs):
                raise RuntimeError("(sqlite3.OperationalError) database or disk is full")
            monkeypatch.setattr(store, "client", full)
        database = tmp_path / "small" / "mlflow.db"
        assert main(["run", "full.yaml", "--tracking-uri", f"sqlite:///{database}"]) == 3
        err = capsys.readouterr().err
        assert f"disk full: cannot write {database}" in err and "Traceback" not in err
        assert not ray.is_initialized()


@pytest.mark.system
def test_a_full_disk_at_the_end_of_a_sweep_exits_3_with_the_report_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(TINY))

    def save_log(self, storage, *parts):
        raise _enospc(storage.path(*parts))

    def log_report_artifacts(uri, study, files):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "mlartifacts" / files[0].name))

    monkeypatch.setattr(RaySession, "save_log", save_log)
    monkeypatch.setattr(tracking, "log_report_artifacts", log_report_artifacts)
    ray.init(**local_ray_arguments(2))
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", "full.yaml"])
    finally:
        ray.shutdown()
    out = out.getvalue()
    assert code == 3, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("[ndebench] exit 3: disk full: cannot write ") and "/ray_results/full/ray-" in last
    assert f"disk full: cannot write {tmp_path / 'mlartifacts' / 'results.csv'}" in last
    assert (tmp_path / "reports" / "full" / "table.md").exists()
    runs = search(f"sqlite:///{tmp_path / 'mlflow.db'}", "full")
    assert runs and not [r for r in runs if run_status(r) == "running" or r.info.status == "RUNNING"]
    assert [r.data.tags[f"{TAG}status"] for r in runs if r.data.tags.get(f"{TAG}kind") == "trial"] == ["ok"]


# The driver subprocess fills the storage tmpfs itself, right before the sweep writes Ray's log there: a real
# ENOSPC from a real full filesystem at a fixed point of the sweep (a filler racing the driver was flaky).
FILL_THEN_RUN = """
import contextlib, sys
from pathlib import Path
from ndebench.platform.cli.main import main
from ndebench.platform.engine import sweep

write_log = sweep.Sweep._write_log

def fill_then_write(self):
    with open(Path("store") / "filler", "wb") as filler, contextlib.suppress(OSError):
        while True:
            filler.write(bytes(65536))
    return write_log(self)

sweep.Sweep._write_log = fill_then_write
sys.exit(main(["run", "full.yaml", "--storage-path", "store"]))
"""


@pytest.mark.system
def test_a_storage_disk_that_fills_up_during_a_sweep_exits_3(tmp_path):
    """A real 4 MiB tmpfs as the storage path, full once the trials have finished: Ray's log cannot be
    written, the report still is, and `ndebench run` exits 3 naming the storage folder."""
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(TINY))
    with _tmpfs(tmp_path / "store", "4m") as mounted:
        if not mounted:
            pytest.skip("no tmpfs can be mounted here; the injected-ENOSPC sweep test covers the same path")
        with (tmp_path / "run.log").open("w") as log:
            driver = subprocess.run([sys.executable, "-c", FILL_THEN_RUN], cwd=tmp_path, stdout=log,
                                    stderr=subprocess.STDOUT, timeout=600)
        assert driver.returncode == 3, (tmp_path / "run.log").read_text()
    output = (tmp_path / "run.log").read_text()
    assert f"[ndebench] exit 3: disk full: cannot write {tmp_path / 'store' / 'full'}" in output
    assert (tmp_path / "reports" / "full" / "table.md").exists()
    runs = search(f"sqlite:///{tmp_path / 'mlflow.db'}", "full")
    assert runs and not [r for r in runs if run_status(r) == "running" or r.info.status == "RUNNING"]
