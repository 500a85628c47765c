"""A worker killed mid-trial (retries exhausted): its run ends as ``error`` with the reason, the sweep exits 1,
and the study's report works and shows the error. A real local Ray, a real SIGKILL."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fakes import epochs_logged
from ndebench.platform.cli.main import main
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


def _run_killing_workers(tmp_path: Path, config: str, kills: list[tuple[str, int]], every_attempt: bool,
                         seconds: float) -> tuple[int, str, list[int]]:
    """Run ``ndebench run config`` and SIGKILL its trial worker once for each ``(phase, epochs)`` of ``kills``, in
    order, when that many epochs of the phase are logged; with ``every_attempt``, every attempt once the first
    count is reached (so retries are exhausted). Returns (exit code, output, killed pids)."""
    driver = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "run", config], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    killed: list[int] = []
    pending = list(kills)
    try:
        deadline = time.time() + seconds
        while driver.poll() is None:
            assert time.time() < deadline, "the sweep did not end"
            if pending and epochs_logged(tmp_path / "mlflow.db", pending[0][0]) >= pending[0][1]:
                pids = [pid for pid, command in _descendants(driver.pid).items() if "ImplicitFunc" in command]
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed += pids
                if pids and not every_attempt:
                    pending.pop(0)
            time.sleep(0.2)
        output = driver.stdout.read()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    return driver.returncode, output, killed


def test_a_killed_worker_ends_as_error_and_the_report_shows_it(tmp_path, uri, monkeypatch, capsys):
    (tmp_path / "fault.yaml").write_text(yaml.safe_dump(CONFIG))
    returncode, output, killed = _run_killing_workers(tmp_path, "fault.yaml", [("evaluate", 1)], every_attempt=True,
                                                      seconds=240)
    assert len(killed) >= 1
    assert returncode == 1, output
    assert "stage evaluate: 1 trial(s) lost their worker; their MLflow runs are closed as error" in output
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


def test_a_killed_worker_resumes_from_its_checkpoint_with_identical_results(tmp_path, uri):
    """SIGKILL of the trial's worker at epoch 5 of 12: Ray retries it from its epoch checkpoint into the same
    MLflow run; every epoch is logged once and the test metrics equal those of an uninterrupted trial."""
    (tmp_path / "resumed.yaml").write_text(yaml.safe_dump(RESUMED))
    returncode, output, killed = _run_killing_workers(tmp_path, "resumed.yaml", [("evaluate", 5)], every_attempt=False,
                                                      seconds=300)
    assert len(killed) == 1
    assert returncode == 0, output
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
