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


def test_the_turn_7_lock_outs_squat_and_advice_are_refused_or_undone(tmp_path, monkeypatch):
    """../shared/reviews/security-22f8fc8.md: a squatter who plants a lease record of epoch 999999999, hands MANAGE
    to the worker's own account and leaves; a writer's param ``ndebench.lease.999999999`` on the study run; a user
    with no grant whose decoy lease run made a first take advise deleting the study and renaming the decoy back."""
    from mlflow.server.auth.client import AuthServiceClient
    from mlflow.tracking import MlflowClient
    from ndebench.platform.record.lease import heartbeat
    from ndebench.platform.record.lease.heartbeat import Lease
    from ndebench.platform.record.lease.ledger import claim, new_lease_run, released_tag, token
    from ndebench.platform.record.tracking import study_run

    monkeypatch.setenv(heartbeat.STALE_ENV, "1")
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")}
    admin = dict(base, MLFLOW_TRACKING_USERNAME=ADMIN[0], MLFLOW_TRACKING_PASSWORD=ADMIN[1])
    with auth_server(tmp_path, admin) as uri:
        worker = _worker(uri, tmp_path, admin, "P0", "wc")
        _as(monkeypatch, *ADMIN)
        for user in ("wa", "wr"):
            AuthServiceClient(uri).create_user(user, PASSWORD)
        mlflow_client = MlflowClient(uri)

        # N4b: wa makes P2, plants a lease record of epoch 999999999, hands MANAGE to wc and leaves.
        _as(monkeypatch, "wa")
        squatted = mlflow_client.create_experiment("P2")
        planted = new_lease_run(mlflow_client, squatted, "P2")
        assert claim(mlflow_client, planted, 999_999_999, token("squatter:1", "m", "i")) is None
        mlflow_client.set_tag(planted, released_tag(999_999_999), "1")
        AuthServiceClient(uri).grant_user_permission("wc", "experiment", squatted, "MANAGE")
        AuthServiceClient(uri).revoke_user_permission("wa", "experiment", squatted)
        refused = cli(["grant", "--tracking-uri", uri, "--study", "P2", "--user", "wc"], tmp_path, admin)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "'wc' already has MANAGE on it, which grant never gives" in refused.stderr
        # Were it run all the same, the refusal names the run, and the admin's delete of it is a remedy that works.
        _as(monkeypatch, "wc", worker)
        with pytest.raises(heartbeat.DriverConflictError, match=f"in run {planted} leaves no epoch to claim"):
            Lease.take(uri, "P2", print)
        _as(monkeypatch, *ADMIN)
        mlflow_client.delete_run(planted)
        _as(monkeypatch, "wc", worker)
        lease, _ = Lease.take(uri, "P2", print)
        assert lease.epoch == 1
        lease.release()

        # A writer's param on the study run: ignored by the lease, flagged by verify.
        run_id = study_run(uri, "P0", description="", params={"protocol": "paper"}, yaml_text=None)
        mlflow_client.log_param(run_id, "ndebench.lease.999999999", token("forged:1", "m", "i"))
        lease, _ = Lease.take(uri, "P0", print)
        assert lease.epoch == 1
        lease.release()
        wc = dict(base, MLFLOW_TRACKING_USERNAME="wc", MLFLOW_TRACKING_PASSWORD=worker)
        verified = cli(["verify", "--study", "P0", "--tracking-uri", uri], tmp_path, wc)
        assert verified.returncode == 1 and f"run {run_id} " in verified.stdout
        assert "it holds a lease record (ndebench.lease.999999999) but is no lease run" in verified.stdout

        # Misleading advice: wr's decoy lease run tagged as study P3's; the first take advises nothing.
        _as(monkeypatch, "wr")
        decoy = mlflow_client.create_experiment("wr-decoy")
        mlflow_client.create_run(decoy, tags={"ndebench.kind": "lease", "ndebench.study": "P3"})
        _as(monkeypatch, *ADMIN)
        said: list[str] = []
        lease, _ = Lease.take(uri, "P3", said.append)
        lease.release()
        line, = (s for s in said if "wr-decoy" in s)
        assert "anyone may make such a run" in line and "delete" not in line and "rename it" not in line
        assert "rename 'wr-decoy' back" not in line
