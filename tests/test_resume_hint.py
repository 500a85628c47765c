"""The command a stopped sweep prints resumes the study it stopped (review user-530e21d, section 6): it repeats the
``--set`` overrides and every option naming the study's stores, shell-quoted; pasted as printed, it completes the
study. ``--resume`` of a complete study says which study of the same config is interrupted, and how to resume it."""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml
from fakes import count_rows
from ndebench.platform.cli.resuming import complete_study_note, resume_command
from ndebench.platform.record.interruption import mark_interrupted
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import client, finish_cell, run_status, search, study_run

SWEEP = {
    "study": "plain", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": ["none"], "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
    "training": {"epochs": 4, "min_epochs": 4, "patience": 4, "lr": [0.01, 0.02]},
    "tune": {"sampler": "grid"}, "resources": {"cpu": 1}, "report": {"figures": "none"},
}


def _args(**given) -> argparse.Namespace:
    defaults = {"config": "sweep.yaml", "set": None, "tracking_uri": None, "data_dir": None,
                "storage_path": "ray_results", "address": None, "out": "reports", "single_node": False,
                "retry_diverged": False, "resume": False}
    return argparse.Namespace(**(defaults | given))


def test_the_command_repeats_every_option_naming_the_study_or_its_stores_shell_quoted():
    args = _args(set=[["study=x", "training.epochs=12"], ["regularizers.continuum_dropout.p=[0.1, 0.3]"]],
                 tracking_uri="sqlite:///my runs.db", data_dir="/d", storage_path="s3://b/r", address="auto",
                 out="rep", single_node=True, verbose=True)
    assert resume_command(args) == (
        "ndebench run sweep.yaml --set study=x training.epochs=12 'regularizers.continuum_dropout.p=[0.1, 0.3]' "
        "--tracking-uri 'sqlite:///my runs.db' --data-dir /d --storage-path s3://b/r --address auto --out rep "
        "--single-node --resume")
    assert resume_command(_args()) == "ndebench run sweep.yaml --resume"


def test_resuming_a_complete_study_names_the_interrupted_study_of_the_same_config(tmp_path, uri):
    config = tmp_path / "sweep.yaml"
    config.write_text("study: plain\n")
    runs = {name: study_run(uri, name, description="", params={}, yaml_text=config.read_text() + extra)
            for name, extra in [("plain", ""), ("x", "# --set study=x\n# --set training.epochs=12\n"),
                                ("other", "# --set study=other\n"), ("elsewhere", "# another file\n")]}
    finish_cell(uri, runs["plain"], "done")
    for name in ("x", "elsewhere"):
        mark_interrupted(uri, name, "stopped by SIGINT (Ctrl-C)")
    finish_cell(uri, runs["other"], "done")
    args = _args(config=str(config), resume=True, tracking_uri=uri)

    note = complete_study_note(args, "plain", uri)

    assert note == (f"note: study 'plain' is already complete, so --resume has nothing to rerun; study 'x' of the "
                    f"same config is interrupted: `ndebench run {config} --set study=x training.epochs=12 "
                    f"--tracking-uri {uri} --resume` continues it")
    assert complete_study_note(args, "x", uri) is None  # x itself is not complete
    assert complete_study_note(_args(config=str(config), tracking_uri=uri), "plain", uri) is None  # no --resume


@pytest.mark.system
@pytest.mark.usefixtures("one_cpu_ray")
def test_a_sweep_stopped_with_set_study_completes_that_study_from_the_printed_command(tmp_path):
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    db, uri = tmp_path / "mlflow.db", f"sqlite:///{tmp_path / 'mlflow.db'}"
    # The user's words: a --set value with a space, a tracking store and a data directory of their own.
    given = ["sweep.yaml", "--set", "study=stopped", "description=a stopped sweep", "--tracking-uri",
             "sqlite:///mlflow.db", "--data-dir", "data"]
    # SIGINT's default action restored: a shell's Ctrl-C, not the ignored SIGINT of a background job.
    driver = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "run", *given], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 400
        while not count_rows(db, "select count(*) from tags where key = 'ndebench.status' and value = 'ok'"):
            assert driver.poll() is None and time.time() < deadline, driver.stdout.read()
            time.sleep(0.1)
        os.killpg(driver.pid, signal.SIGINT)
        out = driver.communicate(timeout=180)[0]
    finally:
        driver.kill()
        driver.wait()
    assert driver.returncode == 130, out
    lines = out.splitlines()
    stop = next(i for i, line in enumerate(lines) if line.startswith("[ndebench] exit 130: interrupted by SIGINT"))
    assert "continues study 'stopped'" in lines[stop], out
    printed = shlex.split(lines[stop + 1])
    assert printed == ["ndebench", "run", "sweep.yaml", "--set", "study=stopped", "description=a stopped sweep",
                       "--tracking-uri", "sqlite:///mlflow.db", "--data-dir", "data", "--resume"]

    again = subprocess.run([sys.executable, "-m", "ndebench.platform", *printed[1:]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)

    assert again.returncode == 0, again.stdout + again.stderr
    study, = search(uri, "stopped", f"tags.`{TAG}kind` = 'study'")
    assert study.data.tags[f"{TAG}status"] == "done"
    assert [run_status(r) for r in search(uri, "stopped", f"tags.`{TAG}phase` = 'evaluate' and "
                                                          f"tags.`{TAG}kind` = 'trial'")] == ["ok"]
    assert not search(uri, "plain")  # the config's own study was never made
    _histories_start_at_epoch_1(uri, "stopped")


def _histories_start_at_epoch_1(uri: str, study: str) -> None:
    """Every trial run's per-epoch metric has one point per epoch, 1, 2, ..., its last epoch; a final value is a
    key of its own with one point (review user-530e21d, section 2: none at step 0 beside a history)."""
    mlflow_client = client(uri)
    trials = search(uri, study, f"tags.`{TAG}kind` = 'trial'")
    assert trials
    for run in trials:
        epochs = int(run.data.tags[f"{TAG}epochs"])
        for key in run.data.metrics:
            if key.startswith("system/"):
                continue
            steps = sorted(p.step for p in mlflow_client.get_metric_history(run.info.run_id, key))
            assert steps in ([0], list(range(1, epochs + 1))), (run.info.run_name, key, steps)
        assert len(mlflow_client.get_metric_history(run.info.run_id, "val_loss")) == epochs
