"""The review's attacks on the record at 530e21d (../shared/reviews/security-530e21d.md), against a real
`ndebench server --auth`, without Ray: a signed-in user with no grant names experiments `S::lease::²` and
`S::lease::<240 nines>`, the study's own worker writes a lease record of 235 nines, swaps a regularizer tag and
hides a run as a lease run, and the creator of an experiment lets a second account in and gives up its own
permission before `grant`. Each still lets the study's driver take its lease, is listed by `ndebench verify`,
or is refused by `grant`."""
from __future__ import annotations

import os

import pytest
from fakes import auth_server, cli

pytestmark = pytest.mark.system
pytest.importorskip("flask_wtf", reason="needs mlflow[auth] (the `cluster` extra)")

ADMIN = ("lead", "admin-correct-horse-battery")
PASSWORD = "a-long-password-for-tests"


def _as(monkeypatch, user: str, password: str = PASSWORD) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


def _worker(uri: str, tmp_path, admin: dict[str, str], study: str, user: str) -> str:
    granted = cli(["grant", "--tracking-uri", uri, "--study", study, "--user", user,
                   "--credentials-out", str(tmp_path / f"{user}.ini")], tmp_path, admin)
    assert granted.returncode == 0, granted.stdout + granted.stderr
    return (tmp_path / f"{user}.ini").read_text().split("mlflow_tracking_password = ")[1].strip()


def test_names_records_tags_and_grants_anyone_could_forge_are_ignored_flagged_or_refused(tmp_path, monkeypatch):
    from mlflow.server.auth.client import AuthServiceClient
    from mlflow.tracking import MlflowClient
    from ndebench.platform.record.lease import heartbeat
    from ndebench.platform.record.lease.heartbeat import Lease
    from ndebench.platform.record.lease.ledger import token
    from ndebench.platform.record.synthetic import write_study

    monkeypatch.setenv(heartbeat.STALE_ENV, "1")
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    admin = dict(base, MLFLOW_TRACKING_USERNAME=ADMIN[0], MLFLOW_TRACKING_PASSWORD=ADMIN[1])
    with auth_server(tmp_path, admin) as uri:
        worker = _worker(uri, tmp_path, admin, "S", "ws")
        _as(monkeypatch, *ADMIN)
        for user in ("stranger", "wa", "wx"):
            AuthServiceClient(uri).create_user(user, PASSWORD)
        mlflow_client = MlflowClient(uri)

        # Finding 1: a user with no grant names the old lease experiments; the worker takes the lease all the same.
        _as(monkeypatch, "stranger")
        for end in ("\u00b2", "9" * 240):
            mlflow_client.create_experiment(f"S::lease::{end}")
        _as(monkeypatch, "ws", worker)
        lease, _ = Lease.take(uri, "S", print)
        assert lease.epoch == 1
        # Finding 5: the worker's own record of 235 nines without a counter; the next take is epoch 2.
        mlflow_client.log_param(lease.run_ids[0], "ndebench.lease." + "9" * 235, token("x:1", "m", "i"))
        lease.release()
        said: list[str] = []
        again, _ = Lease.take(uri, "S", said.append)
        assert again.epoch == 2 and said[0].startswith("ignoring 1 lease record(s) that name no epoch")
        again.release()

        # Finding 2: a writer swaps a regularizer tag, then forges a twin and hides the real run as a lease run.
        write_study(uri, "S", 10)  # none and continuum_dropout, 5 seeds each
        ws = dict(base, MLFLOW_TRACKING_USERNAME="ws", MLFLOW_TRACKING_PASSWORD=worker)
        clean = cli(["verify", "--study", "S", "--tracking-uri", uri], tmp_path, ws)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        noted = clean.stdout.split("fingerprint ")[1].split()[0]
        experiment_id = mlflow_client.get_experiment_by_name("S").experiment_id
        none, dropout = (mlflow_client.search_runs([experiment_id], f"tags.`ndebench.kind` = 'trial' and "
                                                  f"tags.`ndebench.regularizer` = '{r}'")[0]
                         for r in ("none", "continuum_dropout"))
        mlflow_client.set_tag(none.info.run_id, "ndebench.regularizer", "continuum_dropout")
        swapped = cli(["verify", "--study", "S", "--tracking-uri", uri, "--fingerprint", noted], tmp_path, ws)
        assert swapped.returncode == 1 and f"run {none.info.run_id} (evaluate " in swapped.stdout
        assert "its tags or params differ from those it recorded" in swapped.stdout
        assert f"CHANGED since {noted}" in swapped.stdout
        mlflow_client.set_tag(none.info.run_id, "ndebench.regularizer", "none")
        mlflow_client.set_tag(dropout.info.run_id, "ndebench.kind", "lease")
        hidden = cli(["verify", "--study", "S", "--tracking-uri", uri], tmp_path, ws)
        assert hidden.returncode == 1 and f"run {dropout.info.run_id} (evaluate " in hidden.stdout
        assert "tagged as a lease run, but it holds no lease claim" in hidden.stdout

        # Finding 3: wa makes C, lets wx in and gives up its own permission; grant names wx and refuses C.
        _as(monkeypatch, "wa")
        c_id = mlflow_client.create_experiment("C")
        AuthServiceClient(uri).grant_user_permission("wx", "experiment", c_id, "EDIT")
        AuthServiceClient(uri).revoke_user_permission("wa", "experiment", c_id)
        squatted = cli(["grant", "--tracking-uri", uri, "--study", "C", "--user", "wc"], tmp_path, admin)
        assert squatted.returncode == 2, squatted.stdout + squatted.stderr
        assert "study 'C': its experiment" in squatted.stderr
        assert "'wx', not an admin or 'wc', may write or manage it" in squatted.stderr
        assert not (tmp_path / "mlflow-credentials-wc").exists()
