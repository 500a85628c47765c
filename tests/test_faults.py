"""A worker killed mid-trial (retries exhausted): its run ends as ``error`` with the reason, the sweep exits 1,
and the study's report works and shows the error. A real local Ray, a real SIGKILL."""
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from ndebench.platform.cli.main import main
from ndebench.platform.failures.leftovers import DRIVER_LOG
from ndebench.platform.record.runs import parse_param
from ndebench.platform.record.tracking import TAG, client, search
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialSpec

pytestmark = [pytest.mark.system, pytest.mark.usefixtures("one_cpu_ray")]

CONFIG = {
    "study": "fault", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
    "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
    # Long enough that the trial is still training when it is killed.
    "training": {"epochs": 500, "min_epochs": 500, "patience": 500, "lr": 0.01},
    "tune": {"max_failures": 1}, "report": {"figures": "none"},
}
RESUMED = {
    "study": "resumed", "models": ["neural_cde"], "datasets": ["synthetic"],
    "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]}, "regularizers": {"continuum_dropout": {"p": 0.3, "m": 10}},
    "training": {"epochs": 12, "min_epochs": 12, "patience": 12, "lr": 0.01}, "report": {"figures": "none"},
}


def _descendants(root: int) -> dict[int, str]:
    """Command lines of the live descendants of process ``root`` (from /proc)."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    found = {}
    for pid in commands:
        ancestor = parents.get(pid)
        while ancestor and ancestor != root:
            ancestor = parents.get(ancestor)
        if ancestor == root:
            found[pid] = commands[pid]
    return found


def _epochs_logged(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("select count(*) from metrics where key = 'train_loss'").fetchone()[0]
    except sqlite3.Error:
        return 0


def _run_killing_workers(tmp_path: Path, config: str, after_epochs: int, every_attempt: bool,
                         seconds: float) -> tuple[int, str, list[int]]:
    """Run ``ndebench run config`` and SIGKILL its trial worker once ``after_epochs`` epochs are logged: only
    the first attempt, or ``every_attempt`` (so retries are exhausted). Returns (exit code, output, killed pids)."""
    driver = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "run", config], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    killed: list[int] = []
    try:
        deadline = time.time() + seconds
        while driver.poll() is None:
            assert time.time() < deadline, "the sweep did not end"
            if (every_attempt or not killed) and _epochs_logged(tmp_path / "mlflow.db") >= after_epochs:
                pids = [pid for pid, command in _descendants(driver.pid).items() if "ImplicitFunc" in command]
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed += pids
            time.sleep(0.2)
        output = driver.stdout.read()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return driver.returncode, output, killed


def test_a_killed_worker_ends_as_error_and_the_report_shows_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "fault.yaml").write_text(yaml.safe_dump(CONFIG))
    returncode, output, killed = _run_killing_workers(tmp_path, "fault.yaml", 1, every_attempt=True, seconds=240)
    assert len(killed) >= 1
    assert returncode == 1, output
    assert "stage evaluate: 1 trial(s) lost their worker; their MLflow runs are closed as error" in output
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = search(uri, "fault", f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'")
    assert len(runs) == 1
    run = client(uri).get_run(runs[0].info.run_id)
    assert run.info.status == "FAILED" and run.data.tags[f"{TAG}status"] == "error"
    assert run.data.tags[f"{TAG}error"].startswith("the worker running this trial died before recording an outcome: ")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--study", "fault"]) == 0
    assert "1 evaluate-phase runs: 0 ok, 0 diverged, 1 error." in capsys.readouterr().out
    text = (tmp_path / "reports" / "fault" / "table.md").read_text()
    assert "neural_cde / synthetic / none, seed 0: error: the worker running this trial died" in text


def test_a_killed_worker_resumes_from_its_checkpoint_with_identical_results(tmp_path):
    """SIGKILL of the trial's worker at epoch 5 of 12: Ray retries it from its epoch checkpoint into the same
    MLflow run; every epoch is logged once and the test metrics equal those of an uninterrupted trial."""
    (tmp_path / "resumed.yaml").write_text(yaml.safe_dump(RESUMED))
    returncode, output, killed = _run_killing_workers(tmp_path, "resumed.yaml", 5, every_attempt=False, seconds=300)
    assert len(killed) == 1
    assert returncode == 0, output
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = search(uri, "resumed", f"tags.`{TAG}phase` = 'evaluate' and tags.`{TAG}kind` = 'trial'")
    assert len(runs) == 1
    run = client(uri).get_run(runs[0].info.run_id)
    assert run.data.tags[f"{TAG}status"] == "ok" and run.info.status == "FINISHED"
    for metric in ("train_loss", "val_loss", "train_time_s"):
        steps = sorted(m.step for m in client(uri).get_metric_history(run.info.run_id, metric) if m.step)
        assert steps == list(range(1, 13)), metric  # step 0 holds the best epoch's final value
    provenance = {"version", "git_commit", "git_dirty", "python", "lib.torch", "lib.ray", "lib.mlflow", "host"}
    for any_run in search(uri, "resumed"):
        assert {f"{TAG}{key}" for key in provenance} <= set(any_run.data.tags), any_run.info.run_name
    assert run.data.tags[f"{TAG}device"].startswith("cpu: ") and run.data.tags[f"{TAG}node"] != "local"
    assert [a.path for a in client(uri).list_artifacts(run.info.run_id, "model")] == ["model/state_dict.pt"]
    spec = TrialSpec.from_flat({k: parse_param(v) for k, v in run.data.params.items()})
    uninterrupted = run_trial(spec)
    assert uninterrupted.test == {k: v for k, v in run.data.metrics.items() if k.startswith("test_")}


DRIVER = {
    "study": "driver", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": 0.3, "m": 10}},
    "model": {"hidden_size": 8}, "evaluate": {"seeds": [0, 1]},
    "training": {"epochs": 4, "min_epochs": 4, "patience": 4, "lr": [0.01, 0.02]},
    "base": {"sampler": "grid"}, "report": {"figures": "none"},
}


def _runs_logged(db: Path, phase: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute(
                "select count(distinct m.run_uuid) from metrics m join tags t on t.run_uuid = m.run_uuid "
                "where m.key = 'train_loss' and t.key = 'ndebench.phase' and t.value = ?", (phase,)).fetchone()[0]
    except sqlite3.Error:
        return 0


def _kill_during(command: list[str], cwd: Path, phase: str, env: dict[str, str] | None = None) -> int:
    """Start ``command`` and SIGKILL it once a trial of ``phase`` has logged an epoch; returns its pid."""
    driver = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, env=env)
    try:
        deadline = time.time() + 300
        while _runs_logged(cwd / "mlflow.db", phase) == 0:
            assert driver.poll() is None and time.time() < deadline, f"the sweep never reached the {phase} stage"
            time.sleep(0.2)
        driver.kill()
        driver.wait()
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the local Ray processes the dead driver leaves behind
    return driver.pid


def _driver_log(folder: Path, pid: int) -> list[Path]:
    """The Ray-output folder of driver ``pid`` in the temporary directory ``folder``, if it is still there."""
    return list(folder.glob(f"ndebench-{DRIVER_LOG}-{socket.gethostname()}-{pid}-*"))


def test_resume_after_the_driver_is_killed_in_search_and_in_evaluate(tmp_path):
    """SIGKILL of `ndebench run` while the base stage trains, then of its `--resume` while evaluate trains,
    then `--resume` again: every planned evaluate run exists once, the cut-off base trials were continued (one
    run per grid point), no run is left running, and the temporary folders the killed drivers and workers left
    are gone (each driver's removes the last one's; the sweep's processes get a temporary directory of their own)."""
    (tmp_path / "driver.yaml").write_text(yaml.safe_dump(DRIVER))
    command = [sys.executable, "-m", "ndebench.platform", "run", "driver.yaml"]
    private = Path(tempfile.mkdtemp(prefix="nb-", dir="/tmp"))  # short: Ray's sockets go under it too
    env = {**os.environ, "TMPDIR": str(private)}
    try:
        first = _kill_during(command, tmp_path, "base", env)
        assert len(_driver_log(private, first)) == 1  # a SIGKILL skips the driver's own removal
        second = _kill_during([*command, "--resume"], tmp_path, "evaluate", env)
        assert _driver_log(private, first) == [] and len(_driver_log(private, second)) == 1
        resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=600, env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert sorted(path.name for path in private.glob("ndebench-*")) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = search(uri, "driver")
    assert not [r.info.run_id for r in runs
                if r.info.status == "RUNNING" or r.data.tags.get(f"{TAG}status") == "running"]
    evaluated = [r for r in runs
                 if r.data.tags.get(f"{TAG}kind") == "trial" and r.data.tags[f"{TAG}phase"] == "evaluate"]
    keys = sorted((r.data.tags[f"{TAG}regularizer"], r.data.tags[f"{TAG}seed"]) for r in evaluated)
    assert keys == [("continuum_dropout", "0"), ("continuum_dropout", "1"), ("none", "0"), ("none", "1")]
    assert all(r.data.tags[f"{TAG}status"] == "ok" for r in evaluated)
    # The base trials the first driver left running were continued, not repeated: one run per grid point.
    base = [r for r in runs if r.data.tags.get(f"{TAG}kind") == "trial" and r.data.tags[f"{TAG}phase"] == "base"]
    assert sorted(r.data.params["training.lr"] for r in base) == ["0.01", "0.02"]
    assert all(r.data.tags[f"{TAG}status"] == "ok" for r in base)
    assert any(r.data.tags.get(f"{TAG}interruption", "").startswith("driver lost: ") for r in base)
