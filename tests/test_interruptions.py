"""Interruptions and resumes never change a result: real sweeps in subprocesses, stopped with real signals.

A paper-protocol grid sweep is killed (SIGKILL of its driver alone) in its base stage, stopped with Ctrl-C (SIGINT
to its process group, as a terminal sends it) in its tune stage, stopped with Ctrl-C and then killed in its evaluate
stage, and resumed after each stop. Each Ctrl-C exits 130 at once (not Ray Tune ending only the stage and the sweep
reporting lost workers); each resume continues the runs the killed driver left running (one run per grid point and
per (cell, seed), none left running) and removes the temporary folder the killed driver left; the sweep runs exactly
the missing grid points and its tables and test metrics equal those of an uninterrupted sweep; a last resume from
another data directory and CPU count reruns nothing. On PostgreSQL, a driver killed in its evaluate stage resumes to
the same table and test metrics as the uninterrupted sweep on sqlite. A TPE search stopped twice (SIGKILL of its
driver, then SIGTERM to the driver alone) ends with exactly ``num_samples`` trials, and a second driver of a live
study is refused.
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from fakes import cli, count_rows, epochs_logged, without_fingerprint
from ndebench.platform.failures.leftovers import DRIVER_LOG
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import run_status, search

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("one_cpu_ray")]

GRID = {
    "study": "stops", "protocol": "paper", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": [5, 10]}},
    "model": {"hidden_size": 8}, "evaluate": {"seeds": [0, 1]},
    "training": {"epochs": 6, "min_epochs": 6, "patience": 6, "lr": [0.01, 0.02]},
    # One trial at a time (stack 1): a stop in the tune stage then leaves some of its grid points done and some not,
    # which one stack of all four would not; tests/test_stack_sweep.py kills and resumes stacks.
    "base": {"sampler": "grid"}, "tune": {"sampler": "grid"}, "resources": {"cpu": 1, "stack": 1},
    "report": {"figures": "none"},
}
TPE = {
    "study": "tpe", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": ["none"], "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
    # 8 epochs, the trials one at a time (a one-CPU Ray): each stop, sent within 0.1 s of a trial's end, leaves the
    # stage part-way, and the second driver, run in this process and refused before its Ray starts, is answered
    # in a few seconds, long before the first driver's five trials end.
    "training": {"epochs": 8, "min_epochs": 8, "patience": 8, "lr": {"loguniform": [1.0e-3, 1.0e-1]}},
    "tune": {"sampler": "tpe", "num_samples": 5, "n_startup_trials": 2}, "resources": {"cpu": 1},
    "report": {"figures": "none"},
}
COMMAND = [sys.executable, "-m", "ndebench.platform", "run"]


def _ended(db: Path, phase: str) -> int:
    """Trial runs of ``phase`` that ended ok."""
    return count_rows(db, "select count(*) from tags s join tags p on s.run_uuid = p.run_uuid where s.key = "
                      "'ndebench.status' and s.value = 'ok' and p.key = 'ndebench.phase' and p.value = ?", phase)


def _training(db: Path, phase: str) -> int:
    """Runs of ``phase`` that logged an epoch."""
    return count_rows(db, "select count(distinct m.run_uuid) from metrics m join tags t on t.run_uuid = m.run_uuid "
                      "where m.key = 'train_loss' and t.key = 'ndebench.phase' and t.value = ?", phase)


def _start(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    # SIGINT's default action restored: a shell's Ctrl-C, not the ignored SIGINT of a background job.
    return subprocess.Popen([*COMMAND, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _stop_when(driver: subprocess.Popen, ready, signum: int, *, group: bool, seconds: float = 400) -> str:
    """Send ``signum`` to the driver (its process group: a terminal's Ctrl-C) once ``ready()``; its output. The
    driver must exit with the signal's shell code, 128 + ``signum``; a SIGKILL leaves it none (-9)."""
    try:
        deadline = time.time() + seconds
        while not ready():
            assert driver.poll() is None, driver.stdout.read()
            assert time.time() < deadline, "the sweep never got there"
            time.sleep(0.1)
        (os.killpg if group else os.kill)(driver.pid, signum)
        output = driver.communicate(timeout=180)[0]
        assert driver.returncode == (-signum if signum == signal.SIGKILL else 128 + signum), output
        return output
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # what a killed driver leaves of its local Ray
        driver.wait()


def _driver_log(folder: Path, pid: int) -> list[Path]:
    """The Ray-output folder of driver ``pid`` in the temporary directory ``folder``, if it is still there."""
    return list(folder.glob(f"ndebench-{DRIVER_LOG}-{socket.gethostname()}-{pid}-*"))


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)


def _trials(uri: str, study: str, phase: str) -> list:
    return search(uri, study, f"tags.`{TAG}phase` = '{phase}' and tags.`{TAG}kind` = 'trial'")


def _table(folder: Path, study: str) -> str:
    return without_fingerprint((folder / "reports" / study / "table.md").read_text())


def _metrics(uri: str, study: str) -> dict:
    frame = evaluate_runs(uri, study, with_calibration=False)
    columns = sorted(c for c in frame.columns if c.startswith("test_"))
    return {(r.regularizer, r.seed): tuple(getattr(r, c) for c in columns) for r in frame.itertuples()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, one_cpu_ray):
    folder = tmp_path_factory.mktemp("uninterrupted")
    (folder / "grid.yaml").write_text(yaml.safe_dump(GRID))
    done = _run(folder, "grid.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Ray cluster: 1 CPU," in done.stdout
    return folder


def test_grid_sweep_killed_and_stopped_in_every_stage_resumes_to_the_uninterrupted_result(tmp_path, uninterrupted):
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(GRID))
    db, uri = tmp_path / "mlflow.db", f"sqlite:///{tmp_path / 'mlflow.db'}"
    private = Path(tempfile.mkdtemp(prefix="nb-", dir="/tmp"))  # short: Ray's sockets go under it too
    env = {**os.environ, "TMPDIR": str(private)}
    try:
        killed = _start(tmp_path, "grid.yaml", env=env)
        _stop_when(killed, lambda: _training(db, "base") >= 1, signal.SIGKILL, group=False)
        assert len(_driver_log(private, killed.pid)) == 1  # a SIGKILL skips the driver's own removal

        out = _stop_when(_start(tmp_path, "grid.yaml", "--resume", env=env), lambda: _ended(db, "tune") >= 1,
                         signal.SIGINT, group=True)
        assert "[ndebench] exit 130: interrupted by SIGINT (Ctrl-C)" in out and "--resume" in out, out
        assert "lost their worker" not in out, out
        assert _driver_log(private, killed.pid) == []  # removed by the next driver
        finished = sum(run_status(r) == "ok" for r in _trials(uri, "stops", "tune"))
        assert 1 <= finished < 4, out
        cells = search(uri, "stops", f"tags.`{TAG}kind` = 'cell'")
        assert not [c for c in cells if c.data.tags[f"{TAG}phase"] == "tune" and c.data.tags[f"{TAG}status"] == "done"]
        assert not _trials(uri, "stops", "evaluate")
        assert {run_status(r) for r in search(uri, "stops")} <= {"ok", "done", "interrupted"}, out

        out = _stop_when(_start(tmp_path, "grid.yaml", "--resume", env=env),
                         lambda: _training(db, "evaluate") >= 1, signal.SIGINT, group=True)
        assert "[ndebench] exit 130: interrupted by SIGINT (Ctrl-C)" in out and "lost their worker" not in out, out
        assert f"stage tune: {4 - finished} trial(s) over 1 cell(s)" in out, out

        trained = epochs_logged(db, "evaluate")
        killed = _start(tmp_path, "grid.yaml", "--resume", env=env)
        _stop_when(killed, lambda: epochs_logged(db, "evaluate") > trained, signal.SIGKILL, group=False)
        assert len(_driver_log(private, killed.pid)) == 1
        resumed = _run(tmp_path, "grid.yaml", "--resume", env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "stage tune: every cell already done" in resumed.stdout
        assert sorted(path.name for path in private.glob("ndebench-*")) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)

    runs = search(uri, "stops")
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING" or run_status(r) == "running"]
    # The base trials the first driver left running were continued, not repeated: one run per grid point.
    base = _trials(uri, "stops", "base")
    assert sorted(r.data.params["training.lr"] for r in base) == ["0.01", "0.02"]
    assert {run_status(r) for r in base} == {"ok"}
    assert any(r.data.tags.get(f"{TAG}interruption", "").startswith("driver lost: ") for r in base)
    tune = _trials(uri, "stops", "tune")
    points = Counter((r.data.params["regularizer.p"], r.data.params["regularizer.m"]) for r in tune)
    assert points == {(p, m): 1 for p in ("0.1", "0.3") for m in ("5", "10")}
    assert {run_status(r) for r in tune} == {"ok"}
    evaluated = _trials(uri, "stops", "evaluate")
    assert Counter((r.data.tags[f"{TAG}cell"], r.data.tags[f"{TAG}seed"]) for r in evaluated) == {
        (f"neural_cde__synthetic__{reg}", seed): 1 for reg in ("none", "continuum_dropout") for seed in ("0", "1")}
    assert {run_status(r) for r in evaluated} == {"ok"}
    assert _metrics(uri, "stops") == _metrics(f"sqlite:///{uninterrupted / 'mlflow.db'}", "stops")
    assert _table(tmp_path, "stops") == _table(uninterrupted, "stops")

    (tmp_path / "elsewhere").mkdir()
    again = _run(tmp_path, "grid.yaml", "--resume", "--data-dir", "elsewhere", "--set", "resources.cpu=0.5")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "stage evaluate: 0 trial(s) over 0 cell(s), seeds [0, 1], 4 already recorded" in again.stdout
    assert len(_trials(uri, "stops", "evaluate")) == 4 and len(_trials(uri, "stops", "base")) == 2


def test_a_driver_killed_on_postgresql_resumes_to_the_uninterrupted_result(tmp_path, uninterrupted,
                                                                            postgres_cluster):
    """The study in a PostgreSQL database: the driver alone is killed (SIGKILL) while its evaluate stage trains;
    the resume takes the study over at once (its driver is gone from this machine), continues the runs it left
    running and ends with the table and test metrics of the uninterrupted sweep on sqlite."""
    from postgres import count_rows as pg_count

    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(GRID))
    uri = postgres_cluster.new_store()
    trained = ("select count(distinct m.run_uuid) from metrics m join tags t on t.run_uuid = m.run_uuid "
               "where m.key = 'train_loss' and t.key = 'ndebench.phase' and t.value = ?")
    killed = _start(tmp_path, "grid.yaml", "--tracking-uri", uri)
    _stop_when(killed, lambda: pg_count(uri, trained, "evaluate") >= 1, signal.SIGKILL, group=False)
    resumed = _run(tmp_path, "grid.yaml", "--resume", "--tracking-uri", uri)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"taking over study 'stops' from driver {os.uname().nodename}:{killed.pid}" in resumed.stdout, (
        resumed.stdout)
    runs = search(uri, "stops")
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING" or run_status(r) == "running"]
    evaluated = _trials(uri, "stops", "evaluate")
    assert Counter((r.data.tags[f"{TAG}cell"], r.data.tags[f"{TAG}seed"]) for r in evaluated) == {
        (f"neural_cde__synthetic__{reg}", seed): 1 for reg in ("none", "continuum_dropout") for seed in ("0", "1")}
    assert {run_status(r) for r in evaluated} == {"ok"}
    assert any(r.data.tags.get(f"{TAG}interruption", "").startswith("driver lost: ") for r in evaluated)
    assert _metrics(uri, "stops") == _metrics(f"sqlite:///{uninterrupted / 'mlflow.db'}", "stops")
    assert _table(tmp_path, "stops") == _table(uninterrupted, "stops")
    assert (tmp_path / "mlartifacts").is_dir() and not (tmp_path / "mlruns").exists()


def test_tpe_search_stopped_twice_ends_with_its_budget_and_one_driver_per_study(tmp_path):
    (tmp_path / "tpe.yaml").write_text(yaml.safe_dump(TPE))
    db, uri = tmp_path / "mlflow.db", f"sqlite:///{tmp_path / 'mlflow.db'}"

    first = _start(tmp_path, "tpe.yaml")
    try:
        deadline = time.time() + 300
        while not count_rows(db, "select count(*) from params where key like 'ndebench.lease.%'"):
            assert first.poll() is None and time.time() < deadline, "the sweep never took its lease"
            time.sleep(0.1)
        second = cli([*COMMAND[3:], "tpe.yaml", "--resume"], tmp_path, dict(os.environ))  # refused before Ray starts
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"is being run by another driver, {os.uname().nodename}:{first.pid}" in second.stdout + second.stderr
        while _ended(db, "tune") < 1:
            assert first.poll() is None and time.time() < deadline, "no trial ended"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    before = _ended(db, "tune")
    assert before < 5
    out = _stop_when(_start(tmp_path, "tpe.yaml", "--resume"), lambda: _ended(db, "tune") > before, signal.SIGTERM,
                     group=False)
    assert "[ndebench] exit 143: interrupted by SIGTERM" in out and "closed as interrupted" in out, out
    assert f"stage tune: {5 - before} trial(s) over 1 cell(s)" in out, out
    assert _ended(db, "tune") < 5
    assert "taking over study 'tpe' from driver" in out, out
    done = _run(tmp_path, "tpe.yaml", "--resume")
    assert done.returncode == 0, done.stdout + done.stderr
    tune = _trials(uri, "tpe", "tune")
    assert Counter(run_status(r) for r in tune) == {"ok": 5}
    assert len({r.data.params["training.lr"] for r in tune}) == 5
    cell, = [r for r in search(uri, "tpe", f"tags.`{TAG}kind` = 'cell'") if r.data.tags[f"{TAG}phase"] == "tune"]
    assert cell.data.tags[f"{TAG}status"] == "done" and cell.data.metrics["n_trials"] == 5
