"""What a worker credential of `ndebench grant` can and cannot do, tried against a real `ndebench server --auth`,
as docs/cluster.md ('What a worker user can do') states it; and the review's attacks by one study's worker on
another study: a lease written by another user is refused (403) and the study's driver runs on, a study name
squatted before `grant` is refused, a test metric rewritten by a writer of the study is flagged by the report and
by `ndebench verify` (exit 1). `grant` keeps the password out of its output, in an owner-only file, and keeps it
on a second grant; a wrong password exits 2 naming the user's credentials, not the password."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fakes import auth_server, cli

pytestmark = pytest.mark.system
pytest.importorskip("flask_wtf", reason="needs mlflow[auth] (the `cluster` extra)")

ADMIN = ("lead", "admin-correct-horse-battery")
STUDY = {"study": "B", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
         "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
         "training": {"epochs": 2, "min_epochs": 2, "patience": 2, "lr": 0.01}, "report": {"figures": "none"}}
DENIED = "403|Permission denied|PERMISSION_DENIED"


def _as(monkeypatch, user: str, password: str) -> None:
    """This process's MLflow clients send ``user``'s credentials from now on."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


def _password(credentials: Path) -> str:
    return credentials.read_text().split("mlflow_tracking_password = ")[1].strip()


def test_a_worker_writes_its_study_only_and_cannot_touch_another_studys_lease(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.server.auth.client import AuthServiceClient
    from mlflow.tracking import MlflowClient
    from ndebench.platform.record.lease.ledger import beat_tag, lease_runs, token

    base = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    admin = dict(base, MLFLOW_TRACKING_USERNAME=ADMIN[0], MLFLOW_TRACKING_PASSWORD=ADMIN[1])
    with auth_server(tmp_path, admin) as uri:
        passwords = {}
        for study, user in (("A", "wa"), ("B", "wb")):
            granted = cli(["grant", "--tracking-uri", uri, "--study", study, "--user", user,
                           "--credentials-out", str(tmp_path / f"{user}.ini")], tmp_path, admin)
            assert granted.returncode == 0, granted.stdout + granted.stderr
            assert f"user '{user}' created: EDIT on study '{study}'" in granted.stdout
            assert stat.S_IMODE((tmp_path / f"{user}.ini").stat().st_mode) == 0o600
            passwords[user] = _password(tmp_path / f"{user}.ini")
            assert len(passwords[user]) >= 24 and passwords[user] not in granted.stdout + granted.stderr
        again = cli(["grant", "--tracking-uri", uri, "--study", "B", "--user", "wb"], tmp_path, admin)
        assert again.returncode == 0 and "exists (password kept)" in again.stdout, again.stdout + again.stderr
        mlflow_client = MlflowClient(uri)

        # A worker may create experiments (MLflow lets every user), and so squat a name before its grant: refused.
        _as(monkeypatch, "wa", passwords["wa"])
        mlflow_client.create_experiment("C")
        squatted = cli(["grant", "--tracking-uri", uri, "--study", "C", "--user", "wc"], tmp_path, admin)
        assert squatted.returncode == 2, squatted.stdout + squatted.stderr
        assert "study 'C': its experiment" in squatted.stderr
        assert "'wa', not an admin or 'wc', may write" in squatted.stderr
        assert not (tmp_path / "mlflow-credentials-wc").exists()

        home = tmp_path / "home-wb"
        (home / ".mlflow").mkdir(parents=True)
        (home / ".mlflow" / "credentials").write_text((tmp_path / "wb.ini").read_text())
        (tmp_path / "b.yaml").write_text(yaml.safe_dump(STUDY))
        driver = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "run", "b.yaml", "--tracking-uri", uri],
                                  cwd=tmp_path, env=dict(base, HOME=str(home)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            _as(monkeypatch, *ADMIN)
            deadline = time.monotonic() + 300
            while not (experiment := mlflow_client.get_experiment_by_name("B")) or not (
                    runs := lease_runs(mlflow_client, experiment.experiment_id)) or not runs[0].data.params:
                assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()[0]
                time.sleep(0.5)
            lease_run = runs[0].info.run_id
            # wa, the worker of study A, against B's lease: every write refused; an experiment named like the
            # old lease is created, and ignored.
            _as(monkeypatch, "wa", passwords["wa"])
            mlflow_client.create_experiment("B::lease::2", tags={"ndebench.lease.holder": "wa:1"})
            for attack in (lambda: mlflow_client.log_param(lease_run, "ndebench.lease.2", token("wa:1", "m", "x")),
                           lambda: mlflow_client.set_tag(lease_run, beat_tag(1), "999"),
                           lambda: mlflow_client.delete_run(lease_run)):
                with pytest.raises(MlflowException, match=DENIED):
                    attack()
            out = driver.communicate(timeout=900)[0]
        finally:
            if driver.poll() is None:
                driver.kill()
        assert driver.returncode == 0, out[-4000:]

        # What wb, B's worker, can do: read A, write and change B's runs; and cannot: write A, delete B's runs,
        # manage users or permissions.
        _as(monkeypatch, "wb", passwords["wb"])
        a_id, b_id = (mlflow_client.get_experiment_by_name(s).experiment_id for s in ("A", "B"))
        mlflow_client.search_runs([a_id])
        with pytest.raises(MlflowException, match=DENIED):
            mlflow_client.create_run(a_id)
        trial, = mlflow_client.search_runs([b_id], "tags.`ndebench.kind` = 'trial' and tags.`ndebench.phase` = "
                                                   "'evaluate'")
        with pytest.raises(MlflowException, match=DENIED):
            mlflow_client.delete_run(trial.info.run_id)
        for manage in (lambda: AuthServiceClient(uri).create_user("mallory", "a-long-password-x"),
                       lambda: AuthServiceClient(uri).grant_user_permission("wb", "experiment", a_id, "EDIT")):
            with pytest.raises(MlflowException, match=DENIED):
                manage()

        wb = dict(base, MLFLOW_TRACKING_USERNAME="wb", MLFLOW_TRACKING_PASSWORD=passwords["wb"])
        assert cli(["verify", "--study", "B", "--tracking-uri", uri], tmp_path, wb).returncode == 0
        mlflow_client.log_metric(trial.info.run_id, "test_accuracy", 0.96, step=0)  # a writer rewrites a result
        verified = cli(["verify", "--study", "B", "--tracking-uri", uri], tmp_path, wb)
        assert verified.returncode == 1 and f"run {trial.info.run_id} " in verified.stdout, verified.stdout
        reported = cli(["report", "--study", "B", "--tracking-uri", uri, "--out", str(tmp_path / "r"),
                        "--figures", "none"], tmp_path, wb)
        assert reported.returncode == 0, reported.stdout + reported.stderr
        assert (tmp_path / "r/B/table.md").read_text().startswith("WARNING: 1 run(s) have results or tags that changed")
        changed = json.loads((tmp_path / "r/B/summary.json").read_text())["changed_results"]
        assert [c["run_id"] for c in changed] == [trial.info.run_id]

        wrong = cli(["report", "--study", "B", "--tracking-uri", uri], tmp_path,
                    dict(base, MLFLOW_TRACKING_USERNAME="wb", MLFLOW_TRACKING_PASSWORD="wrong-password"))
        assert wrong.returncode == 2, wrong.stdout + wrong.stderr
        assert "refused the credentials (HTTP 401, user 'wb'" in wrong.stderr
        assert "wrong-password" not in wrong.stderr
